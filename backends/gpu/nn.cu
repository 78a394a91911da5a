// nn kernels: convolution as implicit GEMM (forward, input-grad and weight-grad), pooling, batch/layer normalisation (a block per channel / row with block
// reductions) and fused cross entropy.
#include <cmath>

#include "common.h"
#include "kernels.h"
#include "tiled_gemm.h"
#include "tessera/kernels/convert.h"
#include "tessera/ops/reduction.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {
namespace {

struct ConvDims {
  int64_t n, c, h, w, o, kh, kw, ho, wo, sh, sw, ph, pw, dh, dw, groups;
};
ConvDims conv_dims(const Shape& x, const Shape& w, const Shape& out, const OpAttrs& a) {
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], out[2], out[3], a.stride[0], a.stride[1], a.padding[0], a.padding[1],
          a.dilation[0], a.dilation[1], a.groups};
}

template <class T> using acc_t = compute_t<T>;

// The three convolution products as implicit GEMMs, one group per grid slice:
//   forward:     out[g]  (Og x N*P)   = W[g] (Og x K)          @ im2col(x)[g] (K x N*P)
//   input grad:  dx[g]   (Cg x N*H*W) = W[g]^T (Cg x Og*kh*kw)  @ "col2im gather" of dout
//   weight grad: dW[g]   (Og x K)     = dout[g] (Og x N*P)      @ im2col(x)[g]^T
// with K = Cg*kh*kw; the loaders compute addresses on the fly, so nothing is materialised.
struct ConvTiles {
  int64_t m, n, k, tiles_m, tiles_n;
};
ConvTiles conv_tiles(int64_t m, int64_t n, int64_t k) { return {m, n, k, (m + kTile - 1) / kTile, (n + kTile - 1) / kTile}; }
TESSERA_DEVICE void tile_of(const ConvTiles& t, int64_t& g, int64_t& ti, int64_t& tj) {
  const int64_t per_group = t.tiles_m * t.tiles_n, blk = block_x();
  g = blk / per_group;
  ti = (blk % per_group) / t.tiles_n;
  tj = blk % t.tiles_n;
}

// Element (q, output position `pos` = b * P + p) of group g's implicit im2col matrix.
template <class Acc, class T> TESSERA_DEVICE Acc im2col_at(const ConvDims& d, const T* x, int64_t g, int64_t q, int64_t pos) {
  const int64_t p = d.ho * d.wo, kk = d.kh * d.kw, cg = d.c / d.groups;
  const int64_t b = pos / p, oh = (pos % p) / d.wo, ow = pos % d.wo;
  const int64_t ci = q / kk, a = (q / d.kw) % d.kh, e = q % d.kw;
  const int64_t ih = oh * d.sh - d.ph + a * d.dh, iw = ow * d.sw - d.pw + e * d.dw;
  return (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w) ? static_cast<Acc>(x[((b * d.c + g * cg + ci) * d.h + ih) * d.w + iw]) : Acc(0);
}

template <class T> TESSERA_GLOBAL void conv_fwd_kernel(ConvDims d, ConvTiles t, const T* x, const T* w, const T* bias, T* out) {
  using Acc = acc_t<T>;
  TESSERA_SHARED_ARRAY(Acc, as, kTile * kTile);
  TESSERA_SHARED_ARRAY(Acc, bs, kTile * kTile);
  int64_t g, ti, tj;
  tile_of(t, g, ti, tj);
  const int64_t og = d.o / d.groups, p = d.ho * d.wo;
  tiled_gemm<Acc>(
      t.m, t.n, t.k, ti, tj, [&](int64_t oo, int64_t q) { return static_cast<Acc>(w[(g * og + oo) * t.k + q]); },
      [&](int64_t q, int64_t col) { return im2col_at<Acc>(d, x, g, q, col); },
      [&](int64_t oo, int64_t col, Acc acc) {
        const int64_t b = col / p, o = g * og + oo;
        if (bias) acc += static_cast<Acc>(bias[o]);
        out[(b * d.o + o) * p + col % p] = static_cast<T>(acc);
      },
      as, bs);
}

template <class T> TESSERA_GLOBAL void conv_dgrad_kernel(ConvDims d, ConvTiles t, const T* gout, const T* w, T* gx) {
  using Acc = acc_t<T>;
  TESSERA_SHARED_ARRAY(Acc, as, kTile * kTile);
  TESSERA_SHARED_ARRAY(Acc, bs, kTile * kTile);
  int64_t g, ti, tj;
  tile_of(t, g, ti, tj);
  const int64_t cg = d.c / d.groups, og = d.o / d.groups, hw = d.h * d.w, kk = d.kh * d.kw;
  tiled_gemm<Acc>(
      t.m, t.n, t.k, ti, tj,
      [&](int64_t ci, int64_t q) {
        const int64_t oo = q / kk, r = q % kk;
        return static_cast<Acc>(w[((g * og + oo) * cg + ci) * kk + r]);
      },
      [&](int64_t q, int64_t col) {
        const int64_t b = col / hw, ih = (col % hw) / d.w, iw = col % d.w;
        const int64_t oo = q / kk, a = (q / d.kw) % d.kh, e = q % d.kw;
        const int64_t th = ih + d.ph - a * d.dh, tw = iw + d.pw - e * d.dw;  // = oh * sh, ow * sw
        if (th < 0 || tw < 0 || th % d.sh != 0 || tw % d.sw != 0 || th / d.sh >= d.ho || tw / d.sw >= d.wo) return Acc(0);
        return static_cast<Acc>(gout[((b * d.o + g * og + oo) * d.ho + th / d.sh) * d.wo + tw / d.sw]);
      },
      [&](int64_t ci, int64_t col, Acc acc) { gx[((col / hw) * d.c + g * cg + ci) * hw + col % hw] = static_cast<T>(acc); }, as, bs);
}

template <class T> TESSERA_GLOBAL void conv_wgrad_kernel(ConvDims d, ConvTiles t, const T* gout, const T* x, T* gw) {
  using Acc = acc_t<T>;
  TESSERA_SHARED_ARRAY(Acc, as, kTile * kTile);
  TESSERA_SHARED_ARRAY(Acc, bs, kTile * kTile);
  int64_t g, ti, tj;
  tile_of(t, g, ti, tj);
  const int64_t og = d.o / d.groups, p = d.ho * d.wo;
  tiled_gemm<Acc>(
      t.m, t.n, t.k, ti, tj,
      [&](int64_t oo, int64_t r) { return static_cast<Acc>(gout[((r / p) * d.o + g * og + oo) * p + r % p]); },
      [&](int64_t r, int64_t q) { return im2col_at<Acc>(d, x, g, q, r); },
      [&](int64_t oo, int64_t q, Acc acc) { gw[(g * og + oo) * t.n + q] = static_cast<T>(acc); }, as, bs);
}

Grid conv_grid(const ConvTiles& t, int64_t groups) {
  const int64_t blocks = groups * t.tiles_m * t.tiles_n;
  TESSERA_CHECK(blocks < (int64_t{1} << 31), "conv2d", "problem too large for one launch");
  return Grid{static_cast<unsigned>(blocks)};
}

template <class F> void conv_dispatch(DType dt, const char* op, F&& f) {
  if (dt == DType::f32) f.template operator()<float>();
  else if (dt == DType::f64) f.template operator()<double>();
  else throw Error(detail::concat(op, ": supports float32 and float64 on the GPU backends, got ", dt));
}

void conv_fwd(const KernelCall& c) {
  Tensor& out = c.outputs[0];
  const ConvDims d = conv_dims(c.inputs[0].shape(), c.inputs[1].shape(), out.shape(), c.attrs);
  const ConvTiles t = conv_tiles(d.o / d.groups, d.n * d.ho * d.wo, d.c / d.groups * d.kh * d.kw);
  conv_dispatch(out.dtype(), "conv2d", [&]<class T>() {
    launch(conv_fwd_kernel<T>, conv_grid(t, d.groups), Grid{kTile * kTile}, 0, true, d, t, ptr<const T>(c.inputs[0]),
           ptr<const T>(c.inputs[1]), c.inputs[2].defined() ? ptr<const T>(c.inputs[2]) : nullptr, ptr<T>(out));
  });
}
void conv_dgrad(const KernelCall& c) {
  Tensor& gx = c.outputs[0];
  const ConvDims d = conv_dims(gx.shape(), c.inputs[1].shape(), c.inputs[0].shape(), c.attrs);
  const ConvTiles t = conv_tiles(d.c / d.groups, d.n * d.h * d.w, d.o / d.groups * d.kh * d.kw);
  conv_dispatch(gx.dtype(), "conv2d_input_grad", [&]<class T>() {
    launch(conv_dgrad_kernel<T>, conv_grid(t, d.groups), Grid{kTile * kTile}, 0, true, d, t, ptr<const T>(c.inputs[0]),
           ptr<const T>(c.inputs[1]), ptr<T>(gx));
  });
}
void conv_wgrad(const KernelCall& c) {
  Tensor& gw = c.outputs[0];
  const ConvDims d = conv_dims(c.inputs[1].shape(), gw.shape(), c.inputs[0].shape(), c.attrs);
  const ConvTiles t = conv_tiles(d.o / d.groups, d.c / d.groups * d.kh * d.kw, d.n * d.ho * d.wo);
  conv_dispatch(gw.dtype(), "conv2d_weight_grad", [&]<class T>() {
    launch(conv_wgrad_kernel<T>, conv_grid(t, d.groups), Grid{kTile * kTile}, 0, true, d, t, ptr<const T>(c.inputs[0]),
           ptr<const T>(c.inputs[1]), ptr<T>(gw));
  });
}

struct PoolDims {
  int64_t planes, h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw;
  bool count_include_pad;
};
PoolDims pool_dims(const Shape& in, const Shape& out, const OpAttrs& a) {
  return {in[0] * in[1], in[2], in[3], out[2], out[3], a.kernel[0], a.kernel[1], a.stride[0], a.stride[1],
          a.padding[0], a.padding[1], a.dilation[0], a.dilation[1], a.flag};
}

template <class T> TESSERA_GLOBAL void max_pool_kernel(PoolDims d, const T* x, T* y, int64_t* idx) {
  for (int64_t i = global_index(); i < d.planes * d.ho * d.wo; i += grid_stride()) {
    const int64_t ow = i % d.wo, oh = (i / d.wo) % d.ho, p = i / (d.wo * d.ho);
    acc_t<T> best = -INFINITY;
    int64_t bi = -1;
    for (int64_t a = 0; a < d.kh; ++a) {
      const int64_t ih = oh * d.sh - d.ph + a * d.dh;
      if (ih < 0 || ih >= d.h) continue;
      for (int64_t e = 0; e < d.kw; ++e) {
        const int64_t iw = ow * d.sw - d.pw + e * d.dw;
        if (iw < 0 || iw >= d.w) continue;
        const acc_t<T> v = static_cast<acc_t<T>>(x[(p * d.h + ih) * d.w + iw]);
        if (bi < 0 || ((v > best || v != v) && best == best)) best = v, bi = ih * d.w + iw;
      }
    }
    y[i] = static_cast<T>(best);
    idx[i] = bi;
  }
}

template <class T> TESSERA_GLOBAL void max_pool_bwd_kernel(PoolDims d, const T* gout, const int64_t* idx, T* gx) {
  // One thread per plane: the plane's scatter is sequential, so it needs no atomics.
  for (int64_t p = global_index(); p < d.planes; p += grid_stride()) {
    T* plane = gx + p * d.h * d.w;
    for (int64_t j = 0; j < d.h * d.w; ++j) plane[j] = static_cast<T>(0.0f);
    for (int64_t j = 0; j < d.ho * d.wo; ++j) {
      const int64_t k = idx[p * d.ho * d.wo + j];
      if (k >= 0) plane[k] = static_cast<T>(static_cast<acc_t<T>>(plane[k]) + static_cast<acc_t<T>>(gout[p * d.ho * d.wo + j]));
    }
  }
}

TESSERA_HD_INLINE int64_t avg_count(const PoolDims& d, int64_t oh, int64_t ow, int64_t& h0, int64_t& h1, int64_t& w0, int64_t& w1) {
  h0 = oh * d.sh - d.ph, w0 = ow * d.sw - d.pw;
  h1 = h0 + d.kh < d.h + d.ph ? h0 + d.kh : d.h + d.ph;
  w1 = w0 + d.kw < d.w + d.pw ? w0 + d.kw : d.w + d.pw;
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = h0 < 0 ? 0 : h0, w0 = w0 < 0 ? 0 : w0, h1 = h1 > d.h ? d.h : h1, w1 = w1 > d.w ? d.w : w1;
  return d.count_include_pad ? padded : (h1 - h0) * (w1 - w0);
}

template <class T> TESSERA_GLOBAL void avg_pool_kernel(PoolDims d, const T* x, T* y) {
  for (int64_t i = global_index(); i < d.planes * d.ho * d.wo; i += grid_stride()) {
    const int64_t ow = i % d.wo, oh = (i / d.wo) % d.ho, p = i / (d.wo * d.ho);
    int64_t h0, h1, w0, w1;
    const int64_t count = avg_count(d, oh, ow, h0, h1, w0, w1);
    acc_t<T> s = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) s += static_cast<acc_t<T>>(x[(p * d.h + ih) * d.w + iw]);
    y[i] = static_cast<T>(count > 0 ? s / static_cast<acc_t<T>>(count) : acc_t<T>(0));
  }
}

template <class T> TESSERA_GLOBAL void avg_pool_bwd_kernel(PoolDims d, const T* gout, T* gx) {
  for (int64_t p = global_index(); p < d.planes; p += grid_stride()) {
    T* plane = gx + p * d.h * d.w;
    for (int64_t j = 0; j < d.h * d.w; ++j) plane[j] = static_cast<T>(0.0f);
    for (int64_t oh = 0; oh < d.ho; ++oh)
      for (int64_t ow = 0; ow < d.wo; ++ow) {
        int64_t h0, h1, w0, w1;
        const int64_t count = avg_count(d, oh, ow, h0, h1, w0, w1);
        if (count == 0) continue;
        const acc_t<T> share = static_cast<acc_t<T>>(gout[(p * d.ho + oh) * d.wo + ow]) / static_cast<acc_t<T>>(count);
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) plane[ih * d.w + iw] = static_cast<T>(static_cast<acc_t<T>>(plane[ih * d.w + iw]) + share);
      }
  }
}

template <template <class> class K> void float_op(const KernelCall& c) {
  backend_common::dispatch_float(c.outputs[0].dtype(), op_name(c.op).data(), [&]<class T>() { K<T>{}(c); });
}
template <class T> struct MaxPoolF {
  void operator()(const KernelCall& c) {
    const PoolDims d = pool_dims(c.inputs[0].shape(), c.outputs[0].shape(), c.attrs);
    launch(max_pool_kernel<T>, blocks_for(c.outputs[0].numel()), Grid{kThreads}, 0, false, d, ptr<const T>(c.inputs[0]),
           ptr<T>(c.outputs[0]), ptr<int64_t>(c.outputs[1]));
  }
};
template <class T> struct MaxPoolB {
  void operator()(const KernelCall& c) {
    const PoolDims d = pool_dims(c.outputs[0].shape(), c.inputs[0].shape(), c.attrs);
    launch(max_pool_bwd_kernel<T>, blocks_for(d.planes), Grid{kThreads}, 0, false, d, ptr<const T>(c.inputs[0]),
           ptr<const int64_t>(c.inputs[1]), ptr<T>(c.outputs[0]));
  }
};
template <class T> struct AvgPoolF {
  void operator()(const KernelCall& c) {
    const PoolDims d = pool_dims(c.inputs[0].shape(), c.outputs[0].shape(), c.attrs);
    launch(avg_pool_kernel<T>, blocks_for(c.outputs[0].numel()), Grid{kThreads}, 0, false, d, ptr<const T>(c.inputs[0]),
           ptr<T>(c.outputs[0]));
  }
};
template <class T> struct AvgPoolB {
  void operator()(const KernelCall& c) {
    const PoolDims d = pool_dims(c.outputs[0].shape(), c.inputs[0].shape(), c.attrs);
    launch(avg_pool_bwd_kernel<T>, blocks_for(d.planes), Grid{kThreads}, 0, false, d, ptr<const T>(c.inputs[0]), ptr<T>(c.outputs[0]));
  }
};
}  // namespace

void register_norm_kernels(KernelTable& table);  // norm.cu

void register_nn(KernelTable& table) {
  table[OpId::Conv2d] = &conv_fwd;
  table[OpId::Conv2dInputGrad] = &conv_dgrad;
  table[OpId::Conv2dWeightGrad] = &conv_wgrad;
  table[OpId::MaxPool2d] = &float_op<MaxPoolF>;
  table[OpId::MaxPool2dBackward] = &float_op<MaxPoolB>;
  table[OpId::AvgPool2d] = &float_op<AvgPoolF>;
  table[OpId::AvgPool2dBackward] = &float_op<AvgPoolB>;
  register_norm_kernels(table);
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
