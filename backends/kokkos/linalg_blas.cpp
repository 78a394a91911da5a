// The GEMM-shaped ops through KokkosBlas::gemm (Kokkos Kernels) when it was found: on a host
// space it reaches the BLAS Kokkos Kernels was built with (OpenBLAS, MKL), on a GPU build cuBLAS
// or rocBLAS, and Kokkos Kernels' own kernels where it has no TPL. f32/f64 only (the TPLs' types):
// - matmul, 2-D and batched, with each operand row-major or transposed in memory (a transpose
//   flag, no copy), one gemm per batch matrix;
// - linear: one gemm against w^T, then bias and activation in one pass over the output;
// - conv2d forward / input grad / weight grad: the operands of linalg.cpp's implicit GEMMs
//   (backends/common/nn_geometry.h; the input gradient as W^T @ dout and a col2im gather)
//   gathered into a workspace from the caching allocator, a
//   chunk of samples at a time, one gemm per group and chunk, and the result scattered back.
// Each entry point returns false, having run nothing, where the team-tiled GEMM must run instead.
#include "linalg_blas.h"

#ifdef TESSERA_HAVE_KOKKOS_KERNELS
#include <KokkosBlas3_gemm.hpp>
#include <algorithm>
#include <cstdlib>
#include <string>
#if defined(__linux__)
#include <link.h>
#endif

#include "../common/nn_geometry.h"
#include "tessera/kernels/activation.h"
#include "tessera/ops/creation.h"
#include "tessera/runtime.h"

namespace tessera::kokkos {
namespace {
using namespace backend_common::nn;

bool blas_enabled();
// Deterministic mode keeps the BLAS out (blas_nondeterministic_ops).
bool blas_dtype(DType dt) { return blas_enabled() && !deterministic() && (dt == DType::f32 || dt == DType::f64); }

/** A matrix operand: `rows` x `cols` row-major at p, used as is or transposed. */
template <class T>
struct Mat {
  const T* p;
  int64_t rows, cols;
  bool trans;
};

/** C (m x n, row-major, contiguous) = alpha * op(A) op(B) + beta * C. */
template <class T>
void gemm(const Mat<T>& a, const Mat<T>& b, T* c, int64_t m, int64_t n, T beta) {
  using In = Kokkos::View<const T**, Kokkos::LayoutRight, Mem, Kokkos::MemoryUnmanaged>;
  using Out = Kokkos::View<T**, Kokkos::LayoutRight, Mem, Kokkos::MemoryUnmanaged>;
  KokkosBlas::gemm(a.trans ? "T" : "N", b.trans ? "T" : "N", T(1), In(a.p, a.rows, a.cols), In(b.p, b.rows, b.cols), beta, Out(c, m, n));
}

/**
 * The last two axes of t (r x c, strides sr, sc) as a row-major matrix or the transpose of one;
 * false for any other layout. Axes of size 1 may carry any stride.
 */
template <class T>
bool as_mat(const Tensor& t, const T* p, Mat<T>& out) {
  const int64_t d = t.dim(), r = t.size(d - 2), c = t.size(d - 1), sr = t.strides()[d - 2], sc = t.strides()[d - 1];
  if ((c == 1 || sc == 1) && (r == 1 || sr == c)) out = {p, r, c, false};
  else if ((r == 1 || sr == 1) && (c == 1 || sc == r)) out = {p, c, r, true};
  else return false;
  return true;
}

template <class T>
bool matmul_impl(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t d = out.dim(), m = out.size(d - 2), n = out.size(d - 1);
  Mat<T> ma{}, mb{};
  if (!as_mat(a, ptr<const T>(a), ma) || !as_mat(b, ptr<const T>(b), mb) || !out.is_contiguous()) return false;
  const Indexer<3> batch = backend_common::matmul_batch_indexer(a, b, out);
  const int64_t batches = out.numel() / (m * n);
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t off[3];
    batch.offsets(bi, off);
    Mat<T> ab = ma, bb = mb;
    ab.p += off[0], bb.p += off[1];
    gemm(ab, bb, ptr<T>(out) + off[2], m, n, T(0));
  }
  return true;
}

/** out = act(out + bias) in place, out m x n row-major; bias (stride bs) may be null. */
template <Activation A, class T>
void bias_activation(T* out, const T* bias, int64_t bs, int64_t m, int64_t n) {
  if (!bias) {
    for_n(
        "linear_epilogue", m * n, KOKKOS_LAMBDA(int64_t i) { out[i] = ActOf<A>{}(out[i]); });
    return;
  }
  for_rows(
      "linear_epilogue", m, n, KOKKOS_LAMBDA(int64_t i, int64_t j) { out[i * n + j] = ActOf<A>{}(out[i * n + j] + bias[j * bs]); });
}

template <class T>
bool linear_impl(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, Activation act) {
  Mat<T> mx{}, mw{};
  if (!as_mat(x, ptr<const T>(x), mx) || !as_mat(w, ptr<const T>(w), mw) || !out.is_contiguous()) return false;
  mw.trans = !mw.trans;  // B = w^T
  const int64_t m = out.size(0), n = out.size(1);
  gemm(mx, mw, ptr<T>(out), m, n, T(0));
  if (bias.defined() || act != Activation::none)
    backend_common::dispatch_activation(
        act, [&]<Activation A>() { bias_activation<A>(ptr<T>(out), opt<T>(bias), bias.defined() ? bias.strides()[0] : 0, m, n); });
  return true;
}

// Samples per chunk: the gathered operand and the GEMM result of one chunk stay under 2^20
// elements, so the workspace is bounded for any batch size and a chunk is still in cache when the
// GEMM reads it. Independent of the thread count, so results are too. TESSERA_KOKKOS_GEMM_CHUNK
// sets another budget (the tests use 1: one sample per chunk, the weight gradient accumulated).
int64_t chunk_budget() {
  static const int64_t budget = [] {
    const char* e = std::getenv("TESSERA_KOKKOS_GEMM_CHUNK");
    return e && std::atoll(e) > 0 ? static_cast<int64_t>(std::atoll(e)) : int64_t{1} << 20;
  }();
  return budget;
}
int64_t chunk_samples(int64_t per_sample, int64_t n) {
  return std::clamp<int64_t>(chunk_budget() / std::max<int64_t>(per_sample, 1), 1, n);
}

// TESSERA_KOKKOS_BLAS=off runs the team-tiled GEMM for every dtype: the tests check it in builds
// that have Kokkos Kernels, and a user can rule Kokkos Kernels out.
bool blas_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("TESSERA_KOKKOS_BLAS");
    return !(e && std::string(e) == "off");
  }();
  return on;
}

template <class T>
Tensor workspace(int64_t numel, const Tensor& like) {
  return empty({std::max<int64_t>(numel, 1)}, like.dtype(), like.device());
}

/**
 * col (k x s*ho*wo) = group g's im2col matrix for samples [n0, n0 + s): row q = (ci, a, e) is
 * the input plane ci shifted by tap (a, e); a team fills one (q, sample) plane.
 */
template <class T>
void im2col(const ConvDims d, const T* x, int64_t g, int64_t n0, int64_t s, T* col) {
  const int64_t kk = d.kh * d.kw, cg = d.c / d.groups, k = cg * kk, cols = s * d.ho * d.wo;
  if constexpr (kHostExec) {
    // Host: a (tap, sample) plane per iteration, its index arithmetic once; each output row is
    // zeros outside the input's columns and a strided copy inside (a unit-stride copy for
    // stride 1), with no per-element division or bounds test.
    for_n(
        "conv2d_im2col", k * s,
        [=](int64_t run) {
          const int64_t q = run / s, b = run % s, ci = q / kk, a = q / d.kw % d.kh, e = q % d.kw;
          const T* plane = x + ((n0 + b) * d.c + g * cg + ci) * d.h * d.w;
          T* dst = col + q * cols + b * d.ho * d.wo;
          // Output columns whose input column iw = ow * sw - pw + e * dw lies in [0, w).
          const int64_t shift = e * d.dw - d.pw;
          const int64_t lo = std::min(d.wo, shift >= 0 ? 0 : (-shift + d.sw - 1) / d.sw);
          const int64_t hi = std::max(lo, std::min(d.wo, d.w - shift <= 0 ? 0 : (d.w - shift + d.sw - 1) / d.sw));
          for (int64_t oh = 0; oh < d.ho; ++oh) {
            T* row = dst + oh * d.wo;
            const int64_t ih = oh * d.sh - d.ph + a * d.dh;
            if (ih < 0 || ih >= d.h) {
              for (int64_t ow = 0; ow < d.wo; ++ow) row[ow] = T(0);
              continue;
            }
            const T* src = plane + ih * d.w;  // column ow reads src[ow * sw + shift]
            for (int64_t ow = 0; ow < lo; ++ow) row[ow] = T(0);
            if (d.sw == 1) {
              for (int64_t ow = lo; ow < hi; ++ow) row[ow] = src[ow + shift];
            } else {
              for (int64_t ow = lo; ow < hi; ++ow) row[ow] = src[ow * d.sw + shift];
            }
            for (int64_t ow = hi; ow < d.wo; ++ow) row[ow] = T(0);
          }
        },
        d.ho * d.wo);
    return;
  }
  for_each_plane(
      "conv2d_im2col", k * s, d.ho, d.wo, KOKKOS_LAMBDA(int64_t run, int64_t oh, int64_t ow) {
        const int64_t q = run / s, b = run % s;
        const int64_t ci = q / kk, a = q / d.kw % d.kh, e = q % d.kw;
        const int64_t ih = oh * d.sh - d.ph + a * d.dh, iw = ow * d.sw - d.pw + e * d.dw;
        const bool in = ih >= 0 && ih < d.h && iw >= 0 && iw < d.w;
        col[q * cols + (b * d.ho + oh) * d.wo + ow] = in ? x[(((n0 + b) * d.c + g * cg + ci) * d.h + ih) * d.w + iw] : T(0);
      });
}

/**
 * dst (rows x s*plane) = the planes [g*rows, (g+1)*rows) of samples [n0, n0 + s) of t (N x C x
 * plane), side by side: the GEMM layout of one group's output (gradient). `to_gemm` false
 * copies the other way, adding bias[g*rows + row] when bias is given.
 */
template <class T>
void planes(const char* label, T* t, int64_t channels, int64_t plane, int64_t g, int64_t rows, int64_t n0, int64_t s, T* gemm_side,
            bool to_gemm, const T* bias) {
  for_each_plane(
      label, rows * s, 1, plane, KOKKOS_LAMBDA(int64_t run, int64_t, int64_t j) {
        const int64_t row = run / s, b = run % s;
        T& m = gemm_side[(row * s + b) * plane + j];
        T& v = t[((n0 + b) * channels + g * rows + row) * plane + j];
        if (to_gemm) m = v;
        else v = bias ? m + bias[g * rows + row] : m;
      });
}

/**
 * dx planes of group g, samples [n0, n0 + s), from col (cg*kh*kw x s*ho*wo) = W[g]^T @ dout[g]:
 * input pixel (ih, iw) of channel ci sums, in the fixed tap order (a, e), the column entries of
 * the output pixels it fed (col2im as a gather: no atomics, deterministic).
 */
template <class T>
void col2im(const ConvDims d, const T* col, int64_t g, int64_t n0, int64_t s, T* dx) {
  const int64_t kk = d.kh * d.kw, cg = d.c / d.groups, cols = s * d.ho * d.wo;
  for_each_plane(
      "conv2d_input_grad_col2im", cg * s, d.h, d.w, KOKKOS_LAMBDA(int64_t run, int64_t ih, int64_t iw) {
        const int64_t ci = run / s, b = run % s;
        T acc = T(0);
        for (int64_t a = 0; a < d.kh; ++a) {
          const int64_t th = ih + d.ph - a * d.dh;  // = oh * sh when output row oh read this pixel
          const int64_t oh = d.sh == 1 ? th : th / d.sh;
          if (th < 0 || (d.sh != 1 && th % d.sh != 0) || oh >= d.ho) continue;
          for (int64_t e = 0; e < d.kw; ++e) {
            const int64_t tw = iw + d.pw - e * d.dw;
            const int64_t ow = d.sw == 1 ? tw : tw / d.sw;
            if (tw < 0 || (d.sw != 1 && tw % d.sw != 0) || ow >= d.wo) continue;
            acc += col[(ci * kk + a * d.kw + e) * cols + (b * d.ho + oh) * d.wo + ow];
          }
        }
        dx[(((n0 + b) * d.c + g * cg + ci) * d.h + ih) * d.w + iw] = acc;
      });
}

// The three convolution bodies are named templates with plain captures (nvcc rules, as in linalg.cpp).
template <class T>
void conv_fwd_blas(const ConvDims d, const T* x, const T* w, const T* bias, T* y, const Tensor& like) {
  const int64_t og = d.o / d.groups, k = d.c / d.groups * d.kh * d.kw, p = d.ho * d.wo;
  const int64_t chunk = chunk_samples((k + og) * p, d.n);
  const Tensor col_t = workspace<T>(k * chunk * p, like), res_t = workspace<T>(og * chunk * p, like);
  T* col = ptr<T>(col_t);
  T* res = ptr<T>(res_t);
  for (int64_t g = 0; g < d.groups; ++g) {
    for (int64_t n0 = 0; n0 < d.n; n0 += chunk) {
      const int64_t s = std::min(chunk, d.n - n0);
      im2col(d, x, g, n0, s, col);
      gemm(Mat<T>{w + g * og * k, og, k, false}, Mat<T>{col, k, s * p, false}, res, og, s * p, T(0));
      planes("conv2d_scatter", y, d.o, p, g, og, n0, s, res, false, bias);
    }
  }
}

template <class T>
void conv_dgrad_blas(const ConvDims d, const T* gout, const T* w, T* dx, const Tensor& like) {
  const int64_t og = d.o / d.groups, k = d.c / d.groups * d.kh * d.kw, p = d.ho * d.wo;
  const int64_t chunk = chunk_samples((k + og) * p, d.n);
  const Tensor go_t = workspace<T>(og * chunk * p, like), col_t = workspace<T>(k * chunk * p, like);
  T* go = ptr<T>(go_t);
  T* col = ptr<T>(col_t);
  for (int64_t g = 0; g < d.groups; ++g) {
    for (int64_t n0 = 0; n0 < d.n; n0 += chunk) {
      const int64_t s = std::min(chunk, d.n - n0);
      planes("conv2d_input_grad_gather", const_cast<T*>(gout), d.o, p, g, og, n0, s, go, true, static_cast<const T*>(nullptr));
      // col (k x s*p) = W[g]^T (k x og) @ dout[g] (og x s*p), then summed back onto the pixels.
      gemm(Mat<T>{w + g * og * k, og, k, true}, Mat<T>{go, og, s * p, false}, col, k, s * p, T(0));
      col2im(d, col, g, n0, s, dx);
    }
  }
}

template <class T>
void conv_wgrad_blas(const ConvDims d, const T* gout, const T* x, T* dw, const Tensor& like) {
  const int64_t og = d.o / d.groups, k = d.c / d.groups * d.kh * d.kw, p = d.ho * d.wo;
  const int64_t chunk = chunk_samples((k + og) * p, d.n);
  const Tensor col_t = workspace<T>(k * chunk * p, like), go_t = workspace<T>(og * chunk * p, like);
  T* col = ptr<T>(col_t);
  T* go = ptr<T>(go_t);
  for (int64_t g = 0; g < d.groups; ++g) {
    for (int64_t n0 = 0; n0 < d.n; n0 += chunk) {
      const int64_t s = std::min(chunk, d.n - n0);
      im2col(d, x, g, n0, s, col);
      planes("conv2d_weight_grad_gather", const_cast<T*>(gout), d.o, p, g, og, n0, s, go, true, static_cast<const T*>(nullptr));
      // dW[g] (og x k) accumulates dout[g] (og x s*p) @ im2col^T over the chunks.
      gemm(Mat<T>{go, og, s * p, false}, Mat<T>{col, k, s * p, true}, dw + g * og * k, og, k, n0 == 0 ? T(0) : T(1));
    }
  }
}

/** Runs body.template operator()<T>() for f32/f64 convolutions; false for other dtypes or empty ones. */
template <class F>
bool conv_dispatch(const Tensor& any, int64_t numel, F&& body) {
  if (!blas_dtype(any.dtype()) || numel == 0) return false;
  if (any.dtype() == DType::f32) body.template operator()<float>();
  else body.template operator()<double>();
  return true;
}
}  // namespace

bool blas_matmul(const KernelCall& call) {
  const Tensor& a = call.inputs[0];
  Tensor& out = call.outputs[0];
  // An empty K is left to the team kernel: KokkosBlas returns without writing C when K is 0.
  if (!blas_dtype(a.dtype()) || out.numel() == 0 || a.size(-1) == 0) return false;
  if (a.dtype() == DType::f32) return matmul_impl<float>(a, call.inputs[1], out);
  return matmul_impl<double>(a, call.inputs[1], out);
}

bool blas_linear(const KernelCall& call) {
  const Tensor& x = call.inputs[0];
  Tensor& out = call.outputs[0];
  if (!blas_dtype(x.dtype()) || out.numel() == 0 || x.size(1) == 0) return false;
  if (x.dtype() == DType::f32) return linear_impl<float>(x, call.inputs[1], call.inputs[2], out, call.attrs.activation);
  return linear_impl<double>(x, call.inputs[1], call.inputs[2], out, call.attrs.activation);
}

bool blas_conv_fwd(const KernelCall& c) {
  const ConvDims d = conv_dims(c.inputs[0].shape(), c.inputs[1].shape(), c.outputs[0].shape(), c.attrs);
  if (d.c / d.groups * d.kh * d.kw == 0) return false;
  return conv_dispatch(c.outputs[0], c.outputs[0].numel(), [&]<class T>() {
    conv_fwd_blas<T>(d, ptr<const T>(c.inputs[0]), ptr<const T>(c.inputs[1]), opt<T>(c.inputs[2]), ptr<T>(c.outputs[0]), c.outputs[0]);
  });
}

bool blas_conv_dgrad(const KernelCall& c) {
  const ConvDims d = conv_dims(c.outputs[0].shape(), c.inputs[1].shape(), c.inputs[0].shape(), c.attrs);
  if (d.o == 0 || d.ho * d.wo == 0) return false;
  return conv_dispatch(c.outputs[0], c.outputs[0].numel(), [&]<class T>() {
    conv_dgrad_blas<T>(d, ptr<const T>(c.inputs[0]), ptr<const T>(c.inputs[1]), ptr<T>(c.outputs[0]), c.outputs[0]);
  });
}

bool blas_conv_wgrad(const KernelCall& c) {
  const ConvDims d = conv_dims(c.inputs[1].shape(), c.outputs[0].shape(), c.inputs[0].shape(), c.attrs);
  if (d.n * d.ho * d.wo == 0) return false;
  return conv_dispatch(c.outputs[0], c.outputs[0].numel(), [&]<class T>() {
    conv_wgrad_blas<T>(d, ptr<const T>(c.inputs[0]), ptr<const T>(c.inputs[1]), ptr<T>(c.outputs[0]), c.outputs[0]);
  });
}

/** The BLAS libraries loaded in this process (which OpenBLAS build: pthreads or OpenMP). */
std::string loaded_blas() {
  std::string names;
#if defined(__linux__)
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("blas") != std::string::npos || name.find("mkl") != std::string::npos) *static_cast<std::string*>(out) += " " + name;
        return 0;
      },
      &names);
#endif
  return names.empty() ? std::string() : " [loaded:" + names + "]";
}

std::string blas_description() {
  std::string tpls;
#ifdef KOKKOSKERNELS_ENABLE_TPL_BLAS
  tpls += " BLAS" + loaded_blas();
#endif
#ifdef KOKKOSKERNELS_ENABLE_TPL_CUBLAS
  tpls += " cuBLAS";
#endif
#ifdef KOKKOSKERNELS_ENABLE_TPL_ROCBLAS
  tpls += " rocBLAS";
#endif
  if (!blas_enabled()) return "team-tiled kernel (TESSERA_KOKKOS_BLAS=off)";
  return "KokkosBlas::gemm (Kokkos Kernels; TPLs:" + (tpls.empty() ? std::string(" none") : tpls) + ") for f32/f64 matmul, linear, conv2d";
}

std::vector<NondeterministicOp> blas_nondeterministic_ops() {
  if (!blas_enabled()) return {};
  const std::string cause =
      "f32/f64 through the BLAS of Kokkos Kernels, which may split its loops by thread count (OpenBLAS splits K "
      "when M x N is small), so results can change with the BLAS's thread count";
  const std::string mode = "the team-tiled GEMM, whose summation order depends on the shapes alone";
  std::vector<NondeterministicOp> out;
  for (OpId op : {OpId::Matmul, OpId::Linear, OpId::Conv2d, OpId::Conv2dInputGrad, OpId::Conv2dWeightGrad})
    out.push_back({op, cause, mode});
  return out;
}

}  // namespace tessera::kokkos

#else

namespace tessera::kokkos {
bool blas_matmul(const KernelCall&) { return false; }
bool blas_linear(const KernelCall&) { return false; }
bool blas_conv_fwd(const KernelCall&) { return false; }
bool blas_conv_dgrad(const KernelCall&) { return false; }
bool blas_conv_wgrad(const KernelCall&) { return false; }
std::string blas_description() { return "team-tiled kernel (Kokkos Kernels not found)"; }
std::vector<NondeterministicOp> blas_nondeterministic_ops() { return {}; }
}  // namespace tessera::kokkos

#endif
