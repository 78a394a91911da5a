// conv2d forward, input-grad and weight-grad as im2col + GEMM (f32/f64, and f16/bf16 with f32
// accumulation); f32 3x3 stride-1 forward, input-grad and weight-grad by Winograd F(2x2, 3x3) where both
// channel counts reach kWinogradMinChannels (conv_winograd.h; the heuristic is there).
//   forward:      out[n, g] (Og x P)  = W[g] (Og x K) @ col(x[n, g]) (K x P)     parallel over samples
//   input grad:   col (K x P) = W[g]^T @ dout[n, g], then col2im-add into dx      parallel over samples
//   weight grad:  dW[g] = dout_g (Og x N*P) @ col_all^T (N*P x K), one GEMM per group and chunk of
//                 samples; GEMM tiles own their outputs, so the sum over samples has a fixed order
//                 and the result does not depend on the thread count.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../common/dtype_dispatch.h"
#include "conv_winograd.h"
#include "cpu_backend.h"
#include "gemm.h"
#include "tessera/runtime.h"

TESSERA_CPU_KERNELS_BEGIN
namespace {

struct ConvGeom {
  int64_t n, c, h, w, o, kh, kw, ho, wo, sh, sw, ph, pw, dh, dw, groups;
  int64_t cg() const { return c / groups; }
  int64_t og() const { return o / groups; }
  int64_t k() const { return cg() * kh * kw; }
  int64_t p() const { return ho * wo; }
  bool pointwise() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
};

ConvGeom geometry(const Shape& x, const Shape& out, const OpAttrs& a, int64_t o) {
  return {x[0], x[1], x[2], x[3], o, a.kernel[0], a.kernel[1], out[2], out[3], a.stride[0], a.stride[1],
          a.padding[0], a.padding[1], a.dilation[0], a.dilation[1], a.groups};
}

// x_plane: [Cg, H, W] -> col rows (c, ki, kj), columns (oh, ow); row stride ld.
template <class T> void im2col(const T* x, const ConvGeom& g, T* col, int64_t ld) {
  for (int64_t c = 0; c < g.cg(); ++c) {
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        T* row = col + ((c * g.kh + ki) * g.kw + kj) * ld;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          T* dst = row + oh * g.wo;
          if (ih < 0 || ih >= g.h) {
            std::fill(dst, dst + g.wo, T{});
            continue;
          }
          const T* src = x + (c * g.h + ih) * g.w;
          if (g.sw == 1) {  // a contiguous run of the input row between zero edges
            const int64_t shift = kj * g.dw - g.pw;  // iw = ow + shift
            const int64_t lo = std::clamp<int64_t>(-shift, 0, g.wo), hi = std::clamp<int64_t>(g.w - shift, lo, g.wo);
            std::fill(dst, dst + lo, T{});
            std::copy(src + lo + shift, src + hi + shift, dst + lo);
            std::fill(dst + hi, dst + g.wo, T{});
            continue;
          }
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            const int64_t iw = ow * g.sw - g.pw + kj * g.dw;
            dst[ow] = (iw >= 0 && iw < g.w) ? src[iw] : T{};
          }
        }
      }
    }
  }
}

// Adds col (K x P) back into the plane dx [Cg, H, W].
template <class T> void col2im_add(const T* col, const ConvGeom& g, T* dx) {
  for (int64_t c = 0; c < g.cg(); ++c) {
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const T* row = col + ((c * g.kh + ki) * g.kw + kj) * g.p();
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          if (ih < 0 || ih >= g.h) continue;
          T* dst = dx + (c * g.h + ih) * g.w;
          const T* src = row + oh * g.wo;
          if (g.sw == 1) {  // the valid run as one vectorisable add
            const int64_t shift = kj * g.dw - g.pw;
            const int64_t lo = std::clamp<int64_t>(-shift, 0, g.wo), hi = std::clamp<int64_t>(g.w - shift, lo, g.wo);
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow + shift] += src[ow];
            continue;
          }
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            const int64_t iw = ow * g.sw - g.pw + kj * g.dw;
            if (iw >= 0 && iw < g.w) dst[iw] += src[ow];
          }
        }
      }
    }
  }
}

// Scratch reused across calls (one per thread and purpose): column buffers are hundreds of KiB
// to tens of MiB, above malloc's mmap threshold, so fresh vectors cost page faults on every call
// (clear_page was 2.6% of a conv forward+backward profile). Contents are always overwritten.
template <class T, int kPurpose> T* scratch(size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// Few samples: parallelise inside each GEMM instead of across samples.
bool per_sample_parallel(int64_t n) { return n >= 2 * std::max(1, num_threads()); }

// f16/bf16 convolutions keep their operands (input, columns, weights, gradients) in 16 bits and
// accumulate every GEMM and every col2im sum in f32, rounding once into the output.
template <class T> using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
template <class T> inline constexpr bool kRoundsOutput = !std::is_same_v<T, acc_t<T>>;

// C (Acc, row stride ldc) = A @ B over T operands with element strides.
template <class T>
void gemm_acc(int64_t m, int64_t n, int64_t k, const T* a, int64_t ars, int64_t acs, const T* b, int64_t brs, int64_t bcs,
              acc_t<T>* c, int64_t ldc, bool parallel) {
  if constexpr (std::is_same_v<T, double>) {
    dgemm(m, n, k, a, ars, acs, b, brs, bcs, c, ldc, parallel);
  } else {
    sgemm(m, n, k, {a, dtype_of_v<T>, ars, acs}, {b, dtype_of_v<T>, brs, bcs}, c, ldc, {}, parallel);
  }
}

template <class T> void round_into(const acc_t<T>* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]);
}

// The Winograd path's shapes: 3x3, stride 1, dilation 1, one group, padding 0..2, enough
// channels on both sides for the transforms to pay (conv_winograd.h).
// TESSERA_CPU_CONV=im2col turns Winograd off (comparisons, and a fallback to rule it out).
bool winograd_fits(const ConvGeom& g) {
  static const bool disabled = [] {
    const char* choice = std::getenv("TESSERA_CPU_CONV");
    return choice && std::strcmp(choice, "im2col") == 0;
  }();
  return !disabled && g.groups == 1 && g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.ph <= 2 && g.pw <= 2 &&
         g.c >= kWinogradMinChannels && g.o >= kWinogradMinChannels && g.ho > 0 && g.wo > 0;
}

template <class T> void conv_forward(const KernelCall& call) {
  using Acc = acc_t<T>;
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const Tensor& bias = call.inputs[2];
  Tensor& out = call.outputs[0];
  const ConvGeom g = geometry(x.shape(), out.shape(), call.attrs, w.shape()[0]);
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* wp = static_cast<const T*>(w.data_ptr());
  const T* bp = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
  T* op = static_cast<T*>(out.data_ptr());
  if constexpr (std::is_same_v<T, float>) {
    if (winograd_fits(g)) {
      Winograd3x3 args;
      args.x = xp, args.n = g.n, args.c = g.c, args.h = g.h, args.w = g.w;
      args.weight = wp, args.o = g.o, args.ph = g.ph, args.pw = g.pw, args.bias = bp;
      args.out = op, args.ho = g.ho, args.wo = g.wo;
      winograd_conv3x3(args);
      return;
    }
  }
  const bool across = per_sample_parallel(g.n);
  parallel_for(g.n, across ? 1 : g.n + 1, [&](int64_t n0, int64_t n1) {
    T* col = scratch<T, 0>(g.pointwise() ? 0 : static_cast<size_t>(g.k() * g.p()));
    Acc* acc = scratch<Acc, 1>(kRoundsOutput<T> ? static_cast<size_t>(g.o * g.p()) : 0);
    for (int64_t n = n0; n < n1; ++n) {
      Acc* sample = kRoundsOutput<T> ? acc : reinterpret_cast<Acc*>(op + n * g.o * g.p());
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        const T* xg = xp + (n * g.c + grp * g.cg()) * g.h * g.w;
        const T* colp = xg;
        if (!g.pointwise()) {
          im2col(xg, g, col, g.p());
          colp = col;
        }
        gemm_acc<T>(g.og(), g.p(), g.k(), wp + grp * g.og() * g.k(), g.k(), 1, colp, g.p(), 1, sample + grp * g.og() * g.p(),
                    g.p(), !across);
      }
      if (bp) {
        for (int64_t o = 0; o < g.o; ++o) {
          Acc* plane = sample + o * g.p();
          const Acc b = static_cast<Acc>(bp[o]);
          for (int64_t i = 0; i < g.p(); ++i) plane[i] += b;
        }
      }
      if constexpr (kRoundsOutput<T>) round_into(sample, op + n * g.o * g.p(), g.o * g.p());
    }
  });
}

template <class T> void conv_input_grad(const KernelCall& call) {
  using Acc = acc_t<T>;
  const Tensor& gout = call.inputs[0];
  const Tensor& w = call.inputs[1];
  Tensor& gx = call.outputs[0];
  const ConvGeom g = geometry(gx.shape(), gout.shape(), call.attrs, w.shape()[0]);
  const T* gp = static_cast<const T*>(gout.data_ptr());
  const T* wp = static_cast<const T*>(w.data_ptr());
  T* dxp = static_cast<T*>(gx.data_ptr());
  if constexpr (std::is_same_v<T, float>) {
    // dx = the 3x3 stride-1 convolution of dout with the weights rotated 180 degrees and
    // transposed, padded by 2 - padding: its output is exactly H x W.
    if (winograd_fits(g) && g.ho + 2 - 2 * g.ph == g.h && g.wo + 2 - 2 * g.pw == g.w) {
      Winograd3x3 args;
      args.x = gp, args.n = g.n, args.c = g.o, args.h = g.ho, args.w = g.wo;
      args.weight = wp, args.flip_transpose = true, args.o = g.c, args.ph = 2 - g.ph, args.pw = 2 - g.pw;
      args.out = dxp, args.ho = g.h, args.wo = g.w;
      winograd_conv3x3(args);
      return;
    }
  }
  const bool across = per_sample_parallel(g.n);
  parallel_for(g.n, across ? 1 : g.n + 1, [&](int64_t n0, int64_t n1) {
    Acc* col = scratch<Acc, 2>(static_cast<size_t>(g.k() * g.p()));
    Acc* acc = scratch<Acc, 3>(kRoundsOutput<T> ? static_cast<size_t>(g.c * g.h * g.w) : 0);
    for (int64_t n = n0; n < n1; ++n) {
      Acc* dx = kRoundsOutput<T> ? acc : reinterpret_cast<Acc*>(dxp + n * g.c * g.h * g.w);
      std::fill(dx, dx + g.c * g.h * g.w, Acc(0));
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        const T* wg = wp + grp * g.og() * g.k();
        const T* go = gp + (n * g.o + grp * g.og()) * g.p();
        Acc* dxg = dx + grp * g.cg() * g.h * g.w;
        if (g.pointwise()) {  // col is the input plane itself: write straight into dx
          gemm_acc<T>(g.k(), g.p(), g.og(), wg, 1, g.k(), go, g.p(), 1, dxg, g.p(), !across);
          continue;
        }
        gemm_acc<T>(g.k(), g.p(), g.og(), wg, 1, g.k(), go, g.p(), 1, col, g.p(), !across);
        col2im_add(col, g, dxg);
      }
      if constexpr (kRoundsOutput<T>) round_into(dx, dxp + n * g.c * g.h * g.w, g.c * g.h * g.w);
    }
  });
}

template <class T> void conv_weight_grad(const KernelCall& call) {
  using Acc = acc_t<T>;
  const Tensor& gout = call.inputs[0];
  const Tensor& x = call.inputs[1];
  Tensor& gw = call.outputs[0];
  const ConvGeom g = geometry(x.shape(), gout.shape(), call.attrs, gw.shape()[0]);
  const T* gp = static_cast<const T*>(gout.data_ptr());
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* dwp = static_cast<T*>(gw.data_ptr());
  if constexpr (std::is_same_v<T, float>) {
    if (winograd_fits(g)) {
      Winograd3x3 args;
      args.x = xp, args.n = g.n, args.c = g.c, args.h = g.h, args.w = g.w, args.o = g.o, args.ph = g.ph, args.pw = g.pw;
      args.ho = g.ho, args.wo = g.wo, args.grad_out = gp, args.grad_weight = dwp;
      winograd_conv3x3_weight_grad(args);
      return;
    }
  }
  // Samples per chunk: keep the column buffer near 64 MiB.
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(g.n, (int64_t{1} << 24) / std::max<int64_t>(g.k() * g.p(), 1)));
  T* col = scratch<T, 4>(static_cast<size_t>(g.k() * chunk * g.p()));
  T* go = scratch<T, 5>(static_cast<size_t>(g.og() * chunk * g.p()));
  Acc* partial = scratch<Acc, 6>(static_cast<size_t>(g.og() * g.k()));
  Acc* acc = scratch<Acc, 7>(kRoundsOutput<T> ? static_cast<size_t>(g.og() * g.k()) : 0);
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    Acc* dw = kRoundsOutput<T> ? acc : reinterpret_cast<Acc*>(dwp + grp * g.og() * g.k());
    for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
      const int64_t nc = std::min(chunk, g.n - n0), cols = nc * g.p();
      parallel_for(nc, 1, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i) {
          const int64_t n = n0 + i;
          const T* xg = xp + (n * g.c + grp * g.cg()) * g.h * g.w;
          if (g.pointwise()) {
            for (int64_t r = 0; r < g.k(); ++r) std::memcpy(&col[r * cols + i * g.p()], xg + r * g.p(), g.p() * sizeof(T));
          } else {
            im2col(xg, g, col + i * g.p(), cols);
          }
          for (int64_t o = 0; o < g.og(); ++o) {
            std::memcpy(&go[o * cols + i * g.p()], gp + (n * g.o + grp * g.og() + o) * g.p(), g.p() * sizeof(T));
          }
        }
      });
      Acc* target = n0 == 0 ? dw : partial;
      gemm_acc<T>(g.og(), g.k(), cols, go, cols, 1, col, 1, cols, target, g.k(), true);
      if (n0 != 0) {
        for (int64_t i = 0; i < g.og() * g.k(); ++i) dw[i] += partial[i];
      }
    }
    if constexpr (kRoundsOutput<T>) round_into(dw, dwp + grp * g.og() * g.k(), g.og() * g.k());
  }
}

template <template <class> class K> void conv_dispatch(const KernelCall& call) {
  switch (call.outputs[0].dtype()) {
    case DType::f32: K<float>{}(call); return;
    case DType::f64: K<double>{}(call); return;
    case DType::f16: K<Half>{}(call); return;
    case DType::bf16: K<BFloat16>{}(call); return;
    default: throw Error(detail::concat(op_name(call.op), ": supports floating dtypes on cpu, got ", call.outputs[0].dtype()));
  }
}
template <class T> struct Fwd { void operator()(const KernelCall& c) { conv_forward<T>(c); } };
template <class T> struct InGrad { void operator()(const KernelCall& c) { conv_input_grad<T>(c); } };
template <class T> struct WGrad { void operator()(const KernelCall& c) { conv_weight_grad<T>(c); } };
}  // namespace

void register_conv(KernelTable& table) {
  table[OpId::Conv2d] = &conv_dispatch<Fwd>;
  table[OpId::Conv2dInputGrad] = &conv_dispatch<InGrad>;
  table[OpId::Conv2dWeightGrad] = &conv_dispatch<WGrad>;
}

TESSERA_CPU_KERNELS_END
