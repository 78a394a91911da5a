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
 *  vectorise without -ffinite-math-only (maxps differs from fmaxf on NaN). A maximum does not
 *  depend on the order, so the lanes are free: four 8-wide accumulators (a native width for
 *  AVX2, where a 16-wide GCC vector is lowered to scalar selects through the stack). Read out
 *  by element, not by memcpy: the memcpy kept the accumulator in memory, a store-to-load
 *  round trip in every iteration of the AVX-512 build (softmax's max pass ran at a third of
 *  the speed of its exp pass). */
[[gnu::always_inline]] inline float lane_max(int64_t n, const float* x) {
  typedef float F8 __attribute__((vector_size(32)));
  const auto load = [x](int64_t j) {
    F8 v;
    __builtin_memcpy(&v, x + j, sizeof v);
    return v;
  };
  F8 m0, m1, m2, m3;
  for (int l = 0; l < 8; ++l) m0[l] = m1[l] = m2[l] = m3[l] = -__builtin_inff();
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    const F8 a = load(j), b = load(j + 8), c = load(j + 16), d = load(j + 24);
    m0 = a > m0 ? a : m0;
    m1 = b > m1 ? b : m1;
    m2 = c > m2 ? c : m2;
    m3 = d > m3 ? d : m3;
  }
  for (; j + 8 <= n; j += 8) {
    const F8 a = load(j);
    m0 = a > m0 ? a : m0;
  }
  m0 = m1 > m0 ? m1 : m0;
  m2 = m3 > m2 ? m3 : m2;
  m0 = m2 > m0 ? m2 : m0;
  float m = m0[0];
  for (int l = 1; l < 8; ++l) m = m0[l] > m ? m0[l] : m;
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

}  // namespace tessera::cpu
