#pragma once
// Row reductions in a fixed set of 16 independent lanes: element j goes to lane j % 16, the
// lanes are combined pairwise at the end. A sequential double sum is one dependent add per
// element (4 cycles each); 16 lanes vectorise (two ZMM or four YMM registers of doubles) and
// run at memory speed. The order depends only on the row length, never on the ISA or the
// thread count, so both kernel sets and every thread count give identical results.
// always_inline: the caller's kernel set (AVX2 or AVX-512) compiles the loop (isa.h).
#include <cstdint>

namespace tessera::cpu {

inline constexpr int kLanes = 16;

/** Sum of f(j) for j in [0, n), f returning double. */
template <class F> [[gnu::always_inline]] inline double lane_sum(int64_t n, F&& f) {
  double acc[kLanes] = {};
  const int64_t full = n / kLanes * kLanes;
  for (int64_t j = 0; j < full; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += f(j + l);
  }
  for (int64_t j = full; j < n; ++j) acc[j - full] += f(j);
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  return acc[0];
}

/** Maximum of x[0, n) (n > 0); NaNs are skipped (callers that must propagate them do so
 *  through a later sum). GCC vector types: the compare-and-select of a scalar loop does not
 *  vectorise without -ffinite-math-only (maxps differs from fmaxf on NaN). */
[[gnu::always_inline]] inline float lane_max(int64_t n, const float* x) {
  // Two 8-wide vectors (lanes 0-7 and 8-15): a native width for AVX2 (a 16-wide GCC vector is
  // lowered there to scalar selects through the stack) and still one pass for AVX-512.
  typedef float F8 __attribute__((vector_size(32)));
  F8 lo, hi;
  for (int l = 0; l < 8; ++l) lo[l] = hi[l] = -__builtin_inff();
  const int64_t full = n / kLanes * kLanes;
  for (int64_t j = 0; j < full; j += kLanes) {
    F8 a, b;
    __builtin_memcpy(&a, x + j, sizeof a);
    __builtin_memcpy(&b, x + j + 8, sizeof b);
    lo = a > lo ? a : lo;
    hi = b > hi ? b : hi;
  }
  float acc[kLanes];
  __builtin_memcpy(acc, &lo, sizeof lo);
  __builtin_memcpy(acc + 8, &hi, sizeof hi);
  for (int64_t j = full; j < n; ++j) acc[j - full] = x[j] > acc[j - full] ? x[j] : acc[j - full];
  float m = acc[0];
  for (int l = 1; l < kLanes; ++l) m = acc[l] > m ? acc[l] : m;
  return m;
}

}  // namespace tessera::cpu
