#pragma once
// Convolution and pooling geometry shared by the device backends (GPU kernels, Kokkos): the
// index arithmetic of the implicit im2col matrix and of pooling windows, host/device callable.
#include <cmath>
#include <cstdint>

#include "tessera/backend/kernel.h"
#include "tessera/kernels/macros.h"
#include "tessera/shape.h"

namespace tessera::backend_common::nn {

struct ConvDims {
  int64_t n, c, h, w, o, kh, kw, ho, wo, sh, sw, ph, pw, dh, dw, groups;
};
inline ConvDims conv_dims(const Shape& x, const Shape& w, const Shape& out, const OpAttrs& a) {
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], out[2], out[3], a.stride[0], a.stride[1], a.padding[0], a.padding[1],
          a.dilation[0], a.dilation[1], a.groups};
}

// Element (q, output position `pos` = b * P + p) of group g's implicit im2col matrix.
template <class Acc, class T> TESSERA_HD_INLINE Acc im2col_at(const ConvDims& d, const T* x, int64_t g, int64_t q, int64_t pos) {
  const int64_t p = d.ho * d.wo, kk = d.kh * d.kw, cg = d.c / d.groups;
  const int64_t b = pos / p, oh = (pos % p) / d.wo, ow = pos % d.wo;
  const int64_t ci = q / kk, a = (q / d.kw) % d.kh, e = q % d.kw;
  const int64_t ih = oh * d.sh - d.ph + a * d.dh, iw = ow * d.sw - d.pw + e * d.dw;
  return (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w) ? static_cast<Acc>(x[((b * d.c + g * cg + ci) * d.h + ih) * d.w + iw]) : Acc(0);
}

// The three convolution products as implicit GEMMs, one group g at a time:
//   forward:     out[g]  (Og x N*P)   = W[g] (Og x K)          @ im2col(x)[g] (K x N*P)
//   input grad:  dx[g]   (Cg x N*H*W) = W[g]^T (Cg x Og*kh*kw)  @ "col2im gather" of dout
//   weight grad: dW[g]   (Og x K)     = dout[g] (Og x N*P)      @ im2col(x)[g]^T
// with K = Cg*kh*kw. These give the operand elements and output offsets of each product, so
// a backend's tiled GEMM reads them straight from the tensors and nothing is materialised.
struct ConvGemm {
  int64_t m, n, k;
};
inline ConvGemm fwd_gemm(const ConvDims& d) { return {d.o / d.groups, d.n * d.ho * d.wo, d.c / d.groups * d.kh * d.kw}; }
inline ConvGemm dgrad_gemm(const ConvDims& d) { return {d.c / d.groups, d.n * d.h * d.w, d.o / d.groups * d.kh * d.kw}; }
inline ConvGemm wgrad_gemm(const ConvDims& d) { return {d.o / d.groups, d.c / d.groups * d.kh * d.kw, d.n * d.ho * d.wo}; }

/** Forward: offset in out of GEMM element (oo, col) of group g. */
TESSERA_HD_INLINE int64_t fwd_out_offset(const ConvDims& d, int64_t g, int64_t oo, int64_t col) {
  const int64_t p = d.ho * d.wo;
  return ((col / p) * d.o + g * (d.o / d.groups) + oo) * p + col % p;
}
/** Input grad: A = W[g]^T element (ci, q). */
template <class Acc, class T> TESSERA_HD_INLINE Acc dgrad_w_at(const ConvDims& d, const T* w, int64_t g, int64_t ci, int64_t q) {
  const int64_t kk = d.kh * d.kw, cg = d.c / d.groups;
  return static_cast<Acc>(w[((g * (d.o / d.groups) + q / kk) * cg + ci) * kk + q % kk]);
}
/** Input grad: B element (q, col): the output-gradient element that input position col feeds through tap q. */
template <class Acc, class T> TESSERA_HD_INLINE Acc dgrad_gout_at(const ConvDims& d, const T* gout, int64_t g, int64_t q, int64_t col) {
  const int64_t hw = d.h * d.w, kk = d.kh * d.kw;
  const int64_t b = col / hw, ih = (col % hw) / d.w, iw = col % d.w;
  const int64_t oo = q / kk, a = (q / d.kw) % d.kh, e = q % d.kw;
  const int64_t th = ih + d.ph - a * d.dh, tw = iw + d.pw - e * d.dw;  // = oh * sh, ow * sw
  if (th < 0 || tw < 0 || th % d.sh != 0 || tw % d.sw != 0 || th / d.sh >= d.ho || tw / d.sw >= d.wo) return Acc(0);
  return static_cast<Acc>(gout[((b * d.o + g * (d.o / d.groups) + oo) * d.ho + th / d.sh) * d.wo + tw / d.sw]);
}
/** Input grad: offset in dx of GEMM element (ci, col). */
TESSERA_HD_INLINE int64_t dgrad_dx_offset(const ConvDims& d, int64_t g, int64_t ci, int64_t col) {
  const int64_t hw = d.h * d.w;
  return ((col / hw) * d.c + g * (d.c / d.groups) + ci) * hw + col % hw;
}
/** Weight grad: A = dout[g] element (oo, r). */
template <class Acc, class T> TESSERA_HD_INLINE Acc wgrad_gout_at(const ConvDims& d, const T* gout, int64_t g, int64_t oo, int64_t r) {
  const int64_t p = d.ho * d.wo;
  return static_cast<Acc>(gout[((r / p) * d.o + g * (d.o / d.groups) + oo) * p + r % p]);
}

struct PoolDims {
  int64_t planes, h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw;
  bool count_include_pad;
};
inline PoolDims pool_dims(const Shape& in, const Shape& out, const OpAttrs& a) {
  return {in[0] * in[1], in[2],       in[3],        out[2],       out[3],        a.kernel[0],   a.kernel[1],
          a.stride[0],   a.stride[1], a.padding[0], a.padding[1], a.dilation[0], a.dilation[1], a.count_include_pad};
}

TESSERA_HD_INLINE int64_t avg_count(const PoolDims& d, int64_t oh, int64_t ow, int64_t& h0, int64_t& h1, int64_t& w0, int64_t& w1) {
  h0 = oh * d.sh - d.ph, w0 = ow * d.sw - d.pw;
  h1 = h0 + d.kh < d.h + d.ph ? h0 + d.kh : d.h + d.ph;
  w1 = w0 + d.kw < d.w + d.pw ? w0 + d.kw : d.w + d.pw;
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = h0 < 0 ? 0 : h0, w0 = w0 < 0 ? 0 : w0, h1 = h1 > d.h ? d.h : h1, w1 = w1 > d.w ? d.w : w1;
  return d.count_include_pad ? padded : (h1 - h0) * (w1 - w0);
}

/** Max pooling output (plane p, oh, ow), stored at flat index i: value and flat input index. NaN wins. */
template <class Acc, class T>
TESSERA_HD_INLINE void max_pool_at(const PoolDims& d, const T* x, int64_t p, int64_t oh, int64_t ow, int64_t i, T* y, int64_t* idx) {
  Acc best = -INFINITY;
  int64_t bi = -1;
  for (int64_t a = 0; a < d.kh; ++a) {
    const int64_t ih = oh * d.sh - d.ph + a * d.dh;
    if (ih < 0 || ih >= d.h) continue;
    for (int64_t e = 0; e < d.kw; ++e) {
      const int64_t iw = ow * d.sw - d.pw + e * d.dw;
      if (iw < 0 || iw >= d.w) continue;
      const Acc v = static_cast<Acc>(x[(p * d.h + ih) * d.w + iw]);
      // Selects, not a branch: on random data the comparison is a coin flip a branch mispredicts.
      const bool take = (bi < 0) | (((v > best) | (v != v)) & (best == best));
      best = take ? v : best;
      bi = take ? ih * d.w + iw : bi;
    }
  }
  y[i] = static_cast<T>(best);
  if (idx) idx[i] = bi;  // null when no gradient needs the indices
}
/** The same for output element i, flat over (planes, ho, wo). */
template <class Acc, class T>
TESSERA_HD_INLINE void max_pool_at(const PoolDims& d, const T* x, int64_t i, T* y, int64_t* idx) {
  max_pool_at<Acc>(d, x, i / (d.wo * d.ho), (i / d.wo) % d.ho, i % d.wo, i, y, idx);
}

/** Max pooling backward for plane p, sequentially (no atomics, deterministic). */
template <class Acc, class T> TESSERA_HD_INLINE void max_pool_bwd_plane(const PoolDims& d, const T* gout, const int64_t* idx, T* gx, int64_t p) {
  T* plane = gx + p * d.h * d.w;
  for (int64_t j = 0; j < d.h * d.w; ++j) plane[j] = static_cast<T>(0.0f);
  for (int64_t j = 0; j < d.ho * d.wo; ++j) {
    const int64_t k = idx[p * d.ho * d.wo + j];
    if (k >= 0) plane[k] = static_cast<T>(static_cast<Acc>(plane[k]) + static_cast<Acc>(gout[p * d.ho * d.wo + j]));
  }
}

/**
 * Max pooling backward for input element i (flat over planes, h, w): the sum of the gradients
 * of the outputs whose recorded argmax is i, in output order (deterministic, no atomics, and
 * one thread per input element writes coalesced on a GPU).
 */
template <class Acc, class T> TESSERA_HD_INLINE void max_pool_bwd_at(const PoolDims& d, const T* gout, const int64_t* idx, T* gx, int64_t i) {
  const int64_t iw = i % d.w, ih = (i / d.w) % d.h, p = i / (d.w * d.h), self = ih * d.w + iw;
  Acc g = 0;
  for (int64_t a = d.kh - 1; a >= 0; --a) {  // descending taps = ascending output rows
    const int64_t th = ih + d.ph - a * d.dh;
    if (th < 0 || th % d.sh != 0 || th / d.sh >= d.ho) continue;
    const int64_t oh = th / d.sh;
    for (int64_t e = d.kw - 1; e >= 0; --e) {
      const int64_t tw = iw + d.pw - e * d.dw;
      if (tw < 0 || tw % d.sw != 0 || tw / d.sw >= d.wo) continue;
      const int64_t o = (p * d.ho + oh) * d.wo + tw / d.sw;
      if (idx[o] == self) g += static_cast<Acc>(gout[o]);
    }
  }
  gx[i] = static_cast<T>(g);
}

/** Average pooling backward for input element i: each window holding it contributes its share. */
template <class Acc, class T> TESSERA_HD_INLINE void avg_pool_bwd_at(const PoolDims& d, const T* gout, T* gx, int64_t i) {
  const int64_t iw = i % d.w, ih = (i / d.w) % d.h, p = i / (d.w * d.h);
  Acc g = 0;
  for (int64_t a = d.kh - 1; a >= 0; --a) {
    const int64_t th = ih + d.ph - a;
    if (th < 0 || th % d.sh != 0 || th / d.sh >= d.ho) continue;
    const int64_t oh = th / d.sh;
    for (int64_t e = d.kw - 1; e >= 0; --e) {
      const int64_t tw = iw + d.pw - e;
      if (tw < 0 || tw % d.sw != 0 || tw / d.sw >= d.wo) continue;
      const int64_t ow = tw / d.sw;
      int64_t h0, h1, w0, w1;
      const int64_t count = avg_count(d, oh, ow, h0, h1, w0, w1);
      if (count == 0 || ih < h0 || ih >= h1 || iw < w0 || iw >= w1) continue;
      g += static_cast<Acc>(gout[(p * d.ho + oh) * d.wo + ow]) / static_cast<Acc>(count);
    }
  }
  gx[i] = static_cast<T>(g);
}

/** Average pooling output element i. */
template <class Acc, class T> TESSERA_HD_INLINE void avg_pool_at(const PoolDims& d, const T* x, int64_t i, T* y) {
  const int64_t ow = i % d.wo, oh = (i / d.wo) % d.ho, p = i / (d.wo * d.ho);
  int64_t h0, h1, w0, w1;
  const int64_t count = avg_count(d, oh, ow, h0, h1, w0, w1);
  Acc s = 0;
  for (int64_t ih = h0; ih < h1; ++ih)
    for (int64_t iw = w0; iw < w1; ++iw) s += static_cast<Acc>(x[(p * d.h + ih) * d.w + iw]);
  y[i] = static_cast<T>(count > 0 ? s / static_cast<Acc>(count) : Acc(0));
}

/** Average pooling backward for plane p, sequentially. */
template <class Acc, class T> TESSERA_HD_INLINE void avg_pool_bwd_plane(const PoolDims& d, const T* gout, T* gx, int64_t p) {
  T* plane = gx + p * d.h * d.w;
  for (int64_t j = 0; j < d.h * d.w; ++j) plane[j] = static_cast<T>(0.0f);
  for (int64_t oh = 0; oh < d.ho; ++oh)
    for (int64_t ow = 0; ow < d.wo; ++ow) {
      int64_t h0, h1, w0, w1;
      const int64_t count = avg_count(d, oh, ow, h0, h1, w0, w1);
      if (count == 0) continue;
      const Acc share = static_cast<Acc>(gout[(p * d.ho + oh) * d.wo + ow]) / static_cast<Acc>(count);
      for (int64_t ih = h0; ih < h1; ++ih)
        for (int64_t iw = w0; iw < w1; ++iw) plane[ih * d.w + iw] = static_cast<T>(static_cast<Acc>(plane[ih * d.w + iw]) + share);
    }
}

}  // namespace tessera::backend_common::nn
