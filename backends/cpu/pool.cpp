// max_pool2d / avg_pool2d forward and backward over contiguous [N, C, H, W], parallel over
// (n, c) planes. Backward passes scatter within their own plane, so they are race-free and
// deterministic.
#include <cmath>
#include <cstdint>
#include <type_traits>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "../common/dtype_dispatch.h"
#include "../common/max_pool_2x2.h"
#include "cpu_backend.h"

// Pooled rows are short (14 outputs in the CNN): 16-lane AVX-512 loops would leave them all to
// the scalar remainder, so this kernel is vectorised 8 lanes wide in the AVX-512 set too.
#if defined(TESSERA_CPU_AVX512)
#define TESSERA_SHORT_ROWS __attribute__((target("prefer-vector-width=256")))
#else
#define TESSERA_SHORT_ROWS
#endif

TESSERA_CPU_KERNELS_BEGIN
namespace {

struct PoolGeom {
  int64_t planes, h, w, ho, wo;
  const OpAttrs& a;
};
PoolGeom geometry(const Shape& in, const Shape& out, const OpAttrs& a) { return {in[0] * in[1], in[2], in[3], out[2], out[3], a}; }

template <class F> void for_planes(int64_t planes, int64_t plane_work, F&& f) {
  parallel_for(planes, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(plane_work, 1)), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) f(p);
  });
}

constexpr int64_t kPoolBlock = 8;

// The CNN case, 2x2 windows with stride 2 and no padding or dilation: the four taps are
// compared with branch-free selects (vectorisable), keeping the generic loop's rule that the
// first NaN in scan order wins and the first maximum is taken on ties.
template <class T> bool max_pool_2x2(const PoolGeom& g, const T* x, T* y, int64_t* idx) {
  const auto& a = g.a;
  if (a.kernel[0] != 2 || a.kernel[1] != 2 || a.stride[0] != 2 || a.stride[1] != 2 || a.padding[0] != 0 || a.padding[1] != 0 ||
      a.dilation[0] != 1 || a.dilation[1] != 1 || g.h < 2 * g.ho || g.w < 2 * g.wo) {
    return false;
  }
  for_planes(g.planes, g.ho * g.wo * 4, [&](int64_t p) TESSERA_SHORT_ROWS {
    const T* xp = x + p * g.h * g.w;
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      const T* r0 = xp + (2 * oh) * g.w;
      const T* r1 = r0 + g.w;
      T* yo = y + (p * g.ho + oh) * g.wo;
      int64_t* io = idx ? idx + (p * g.ho + oh) * g.wo : nullptr;
      const int64_t base = 2 * oh * g.w;
      // Rows are short (14 outputs in the CNN): whole blocks of kBlock outputs, the last one
      // moved back to overlap the previous (outputs are recomputed, not accumulated, so writing
      // one twice is harmless); a vectorised loop with a scalar tail spent most of its time in
      // the tail.
      if (g.wo < kPoolBlock) {
        backend_common::max_pool_2x2_outputs<T, 1>(r0, r1, yo, io, base, 0, g.wo, g.w);
        continue;
      }
      for (int64_t o0 = 0; o0 < g.wo; o0 += kPoolBlock) {
        backend_common::max_pool_2x2_outputs<T, kPoolBlock>(r0, r1, yo, io, base, std::min(o0, g.wo - kPoolBlock), kPoolBlock, g.w);
      }
    }
  });
  return true;
}

template <class T> void max_pool(const KernelCall& c) {
  using C = compute_t<T>;
  const PoolGeom g = geometry(c.inputs[0].shape(), c.outputs[0].shape(), c.attrs);
  const T* x = static_cast<const T*>(c.inputs[0].data_ptr());
  T* y = static_cast<T*>(c.outputs[0].data_ptr());
  // No indices (null) when no gradient will need them: inference skips their 8 bytes per output.
  int64_t* idx = c.outputs[1].defined() ? static_cast<int64_t*>(c.outputs[1].data_ptr()) : nullptr;
  if (max_pool_2x2(g, x, y, idx)) return;
  const auto& a = c.attrs;
  for_planes(g.planes, g.ho * g.wo * a.kernel[0] * a.kernel[1], [&](int64_t p) {
    const T* xp = x + p * g.h * g.w;
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        C best = -INFINITY;
        int64_t best_i = -1;
        for (int64_t ki = 0; ki < a.kernel[0]; ++ki) {
          const int64_t ih = oh * a.stride[0] - a.padding[0] + ki * a.dilation[0];
          if (ih < 0 || ih >= g.h) continue;
          for (int64_t kj = 0; kj < a.kernel[1]; ++kj) {
            const int64_t iw = ow * a.stride[1] - a.padding[1] + kj * a.dilation[1];
            if (iw < 0 || iw >= g.w) continue;
            const C v = static_cast<C>(xp[ih * g.w + iw]);
            if (best_i < 0 || v > best || std::isnan(v)) {  // NaN wins and stays
              best = v;
              best_i = ih * g.w + iw;
              if (std::isnan(v)) goto done;
            }
          }
        }
      done:
        y[(p * g.ho + oh) * g.wo + ow] = static_cast<T>(best);
        if (idx) idx[(p * g.ho + oh) * g.wo + ow] = best_i;
      }
    }
  });
}

// Input gradients of outputs [o0, o0 + n) of one 2x2 output row (n == N when N > 1): each of
// the window's four elements gets the output's gradient if it won, else 0. The winning tap as
// 0-3 in 32-bit lanes (int64 lanes kept GCC from vectorising the AVX-512 set's loop).
template <class T, int64_t N>
inline __attribute__((always_inline)) TESSERA_SHORT_ROWS void max_pool_backward_2x2_outputs(const T* __restrict gr, const int64_t* __restrict ir,
                                                                                          T* __restrict d0, T* __restrict d1, int64_t base, int64_t o0,
                                                                                          int64_t n, int64_t w) {
  const int64_t count = N > 1 ? N : n;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t ow = o0 + k;
    const int64_t off = ir[ow] - (base + 2 * ow);  // 0, 1 (row 0) or w, w + 1 (row 1)
    const int32_t tap = static_cast<int32_t>(off >= w ? off - w + 2 : off);
    const T v = gr[ow], zero = T(0.0f);
    d0[2 * ow] = tap == 0 ? v : zero;
    d0[2 * ow + 1] = tap == 1 ? v : zero;
    d1[2 * ow] = tap == 2 ? v : zero;
    d1[2 * ow + 1] = tap == 3 ? v : zero;
  }
}

#if defined(__AVX2__)
// The f32 block of 8 outputs in AVX2 (both kernel sets): GCC turns the selects above into
// branches and conditional stores (2.9 ms for the CNN's pool backward, 8 GB/s) and did not
// vectorise any formulation tried (masking the bits included). Winner masks from the int64
// offsets, the gradient and-ed with each mask, even and odd taps interleaved into the rows.
inline void max_pool_backward_2x2_block8(const float* gr, const int64_t* ir, float* d0, float* d1, int64_t base, int64_t o0, int64_t w) {
  const __m256i first = _mm256_set1_epi64x(base + 2 * o0);
  const __m256i step = _mm256_setr_epi64x(0, 2, 4, 6);
  const __m256i off_lo = _mm256_sub_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ir + o0)), _mm256_add_epi64(first, step));
  const __m256i off_hi = _mm256_sub_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ir + o0 + 4)),
                                          _mm256_add_epi64(first, _mm256_add_epi64(step, _mm256_set1_epi64x(8))));
  // The offsets are 0, 1, w or w + 1: their low 32 bits, 8 lanes.
  const __m256i low = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  const __m256i off = _mm256_permute2x128_si256(_mm256_permutevar8x32_epi32(off_lo, low), _mm256_permutevar8x32_epi32(off_hi, low), 0x20);
  const __m256 v = _mm256_loadu_ps(gr + o0);
  const auto masked = [&](int32_t tap_offset) {
    return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(off, _mm256_set1_epi32(tap_offset))));
  };
  const auto store_row = [&](float* d, __m256 even, __m256 odd) {
    const __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);
    _mm256_storeu_ps(d + 2 * o0, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(d + 2 * o0 + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
  };
  const int32_t w32 = static_cast<int32_t>(w);
  store_row(d0, masked(0), masked(1));
  store_row(d1, masked(w32), masked(w32 + 1));
}
#endif

// Backward of max_pool_2x2: the windows tile the input without overlap, so each input element
// is written once — its window's gradient if it was the winner, else 0 — with no zero-fill
// pass and no scatter; rows and columns past the last window are zeroed.
template <class T> bool max_pool_backward_2x2(const PoolGeom& g, const T* go, const int64_t* idx, T* dx) {
  const auto& a = g.a;
  if (a.kernel[0] != 2 || a.kernel[1] != 2 || a.stride[0] != 2 || a.stride[1] != 2 || a.padding[0] != 0 || a.padding[1] != 0 ||
      a.dilation[0] != 1 || a.dilation[1] != 1 || g.h < 2 * g.ho || g.w < 2 * g.wo) {
    return false;
  }
  for_planes(g.planes, g.h * g.w, [&](int64_t p) TESSERA_SHORT_ROWS {
    T* d = dx + p * g.h * g.w;
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      const T* gr = go + (p * g.ho + oh) * g.wo;
      const int64_t* ir = idx + (p * g.ho + oh) * g.wo;
      T* d0 = d + 2 * oh * g.w;
      T* d1 = d0 + g.w;
      const int64_t base = 2 * oh * g.w;
      // Whole blocks of outputs, the last moved back to overlap (as in the forward: every
      // input element is assigned, not accumulated, so writing it twice is harmless).
      if (g.wo < kPoolBlock) {
        max_pool_backward_2x2_outputs<T, 1>(gr, ir, d0, d1, base, 0, g.wo, g.w);
      } else {
        for (int64_t o0 = 0; o0 < g.wo; o0 += kPoolBlock) {
          const int64_t at = std::min(o0, g.wo - kPoolBlock);
#if defined(__AVX2__)
          if constexpr (std::is_same_v<T, float>) {
            if (g.w < (int64_t{1} << 30)) {  // the offsets compared as 32-bit lanes
              max_pool_backward_2x2_block8(gr, ir, d0, d1, base, at, g.w);
              continue;
            }
          }
#endif
          max_pool_backward_2x2_outputs<T, kPoolBlock>(gr, ir, d0, d1, base, at, kPoolBlock, g.w);
        }
      }
      for (int64_t iw = 2 * g.wo; iw < g.w; ++iw) d0[iw] = d1[iw] = T(0.0f);
    }
    std::fill(d + 2 * g.ho * g.w, d + g.h * g.w, T(0.0f));
  });
  return true;
}

template <class T> void max_pool_backward(const KernelCall& c) {
  using C = compute_t<T>;
  const Tensor& gout = c.inputs[0];
  Tensor& gx = c.outputs[0];
  const PoolGeom g = geometry(gx.shape(), gout.shape(), c.attrs);
  const T* go = static_cast<const T*>(gout.data_ptr());
  const int64_t* idx = static_cast<const int64_t*>(c.inputs[1].data_ptr());
  T* dx = static_cast<T*>(gx.data_ptr());
  if (max_pool_backward_2x2(g, go, idx, dx)) return;
  for_planes(g.planes, g.h * g.w, [&](int64_t p) {
    T* d = dx + p * g.h * g.w;
    std::fill(d, d + g.h * g.w, T(0.0f));
    for (int64_t i = 0; i < g.ho * g.wo; ++i) {
      const int64_t k = idx[p * g.ho * g.wo + i];
      if (k >= 0) d[k] = static_cast<T>(static_cast<C>(d[k]) + static_cast<C>(go[p * g.ho * g.wo + i]));
    }
  });
}

// Window of output (oh, ow) clipped to the input, and the divisor PyTorch uses.
struct Window {
  int64_t h0, h1, w0, w1, count;
};
Window window(const OpAttrs& a, int64_t oh, int64_t ow, int64_t h, int64_t w) {
  int64_t h0 = oh * a.stride[0] - a.padding[0], w0 = ow * a.stride[1] - a.padding[1];
  int64_t h1 = std::min(h0 + a.kernel[0], h + a.padding[0]), w1 = std::min(w0 + a.kernel[1], w + a.padding[1]);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0), w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, h), w1 = std::min(w1, w);
  return {h0, h1, w0, w1, a.count_include_pad ? padded : (h1 - h0) * (w1 - w0)};
}

template <class T> void avg_pool(const KernelCall& c) {
  using C = compute_t<T>;
  const PoolGeom g = geometry(c.inputs[0].shape(), c.outputs[0].shape(), c.attrs);
  const T* x = static_cast<const T*>(c.inputs[0].data_ptr());
  T* y = static_cast<T*>(c.outputs[0].data_ptr());
  for_planes(g.planes, g.ho * g.wo * c.attrs.kernel[0] * c.attrs.kernel[1], [&](int64_t p) {
    const T* xp = x + p * g.h * g.w;
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        const Window win = window(c.attrs, oh, ow, g.h, g.w);
        C acc = 0;
        for (int64_t ih = win.h0; ih < win.h1; ++ih) {
          for (int64_t iw = win.w0; iw < win.w1; ++iw) acc += static_cast<C>(xp[ih * g.w + iw]);
        }
        y[(p * g.ho + oh) * g.wo + ow] = static_cast<T>(win.count > 0 ? acc / static_cast<C>(win.count) : C(0));
      }
    }
  });
}

template <class T> void avg_pool_backward(const KernelCall& c) {
  using C = compute_t<T>;
  const Tensor& gout = c.inputs[0];
  Tensor& gx = c.outputs[0];
  const PoolGeom g = geometry(gx.shape(), gout.shape(), c.attrs);
  const T* go = static_cast<const T*>(gout.data_ptr());
  T* dx = static_cast<T*>(gx.data_ptr());
  for_planes(g.planes, g.h * g.w, [&](int64_t p) {
    T* d = dx + p * g.h * g.w;
    std::fill(d, d + g.h * g.w, T(0.0f));
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        const Window win = window(c.attrs, oh, ow, g.h, g.w);
        if (win.count == 0) continue;
        const C share = static_cast<C>(go[(p * g.ho + oh) * g.wo + ow]) / static_cast<C>(win.count);
        for (int64_t ih = win.h0; ih < win.h1; ++ih) {
          for (int64_t iw = win.w0; iw < win.w1; ++iw) d[ih * g.w + iw] = static_cast<T>(static_cast<C>(d[ih * g.w + iw]) + share);
        }
      }
    }
  });
}

template <class T> struct MaxF { void operator()(const KernelCall& c) { max_pool<T>(c); } };
template <class T> struct MaxB { void operator()(const KernelCall& c) { max_pool_backward<T>(c); } };
template <class T> struct AvgF { void operator()(const KernelCall& c) { avg_pool<T>(c); } };
template <class T> struct AvgB { void operator()(const KernelCall& c) { avg_pool_backward<T>(c); } };
}  // namespace

void register_pool(KernelTable& table) {
  table[OpId::MaxPool2d] = &float_dispatch<MaxF>;
  table[OpId::MaxPool2dBackward] = &float_dispatch<MaxB>;
  table[OpId::AvgPool2d] = &float_dispatch<AvgF>;
  table[OpId::AvgPool2dBackward] = &float_dispatch<AvgB>;
}

TESSERA_CPU_KERNELS_END
