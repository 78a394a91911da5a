#pragma once
// One block of 2x2 stride-2 max-pool outputs on a host thread, written so that GCC vectorises
// it: shared by the CPU backend and the Kokkos backend on host execution spaces. Host code only
// (GCC/Clang attributes); the caller's target options (the CPU kernel sets) govern the vector
// width once it is inlined.
#include <cstdint>

#include "tessera/kernels/half.h"

namespace tessera::backend_common {

// Outputs [o0, o0 + n) of one 2x2 max-pool output row (n == N when N > 1, a constant trip count
// the compiler vectorises whole): the first maximum in scan order (a, b, c, d), then the first
// NaN overrides it. Plain selects on whole values: GCC vectorises this form, not one with && and
// || on bools. The winning tap (0-3) is kept in 32-bit lanes, the floats' width (mixing in
// 64-bit indices kept GCC from vectorising: 2.9 GB/s), then becomes an int64 input offset.
template <class T, int64_t N>
[[gnu::always_inline]] inline void max_pool_2x2_outputs(const T* r0, const T* r1, T* yo, int64_t* io, int64_t base, int64_t o0, int64_t n,
                                                        int64_t w) {
  using C = compute_t<T>;
  int32_t tap[N];
  const int64_t count = N > 1 ? N : n;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t ow = o0 + k;
    const C a = static_cast<C>(r0[2 * ow]), b = static_cast<C>(r0[2 * ow + 1]);
    const C c = static_cast<C>(r1[2 * ow]), d = static_cast<C>(r1[2 * ow + 1]);
    C best = a;
    int32_t t = 0;
    t = b > best ? 1 : t, best = b > best ? b : best;
    t = c > best ? 2 : t, best = c > best ? c : best;
    t = d > best ? 3 : t, best = d > best ? d : best;
    const int32_t first_nan = a != a ? 0 : (b != b ? 1 : (c != c ? 2 : 3));
    const bool any_nan = (a != a) | (b != b) | (c != c) | (d != d);
    yo[ow] = static_cast<T>(any_nan ? a + b + c + d : best);  // the sum of a NaN is a NaN
    if constexpr (N > 1) tap[k] = any_nan ? first_nan : t;
    else if (io) io[ow] = base + 2 * ow + ((any_nan ? first_nan : t) >> 1) * w + ((any_nan ? first_nan : t) & 1);
  }
  if constexpr (N > 1) {
    if (!io) return;
    for (int64_t k = 0; k < N; ++k) io[o0 + k] = base + 2 * (o0 + k) + (tap[k] >> 1) * w + (tap[k] & 1);
  }
}

}  // namespace tessera::backend_common
