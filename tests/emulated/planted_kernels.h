#pragma once
// Kernels with a planted missing barrier (a tree reduction and a scan) and their correct
// versions, shared by the schedule-matrix self-test and the ThreadSanitizer test.
#include "gpu/runtime.h"

namespace tessera::planted {
constexpr unsigned kN = 128;

template <bool kBuggy> TESSERA_GLOBAL void block_sum(const int* in, int* out) {
  TESSERA_SHARED_ARRAY(int, s, kN);
  const unsigned t = gpu::thread_x();
  s[t] = in[t];
  gpu::sync_threads();
  for (unsigned step = kN / 2; step > 0; step >>= 1) {
    if (t < step) s[t] += s[t + step];
    if (!kBuggy) gpu::sync_threads();  // the planted bug drops this barrier
  }
  if (t == 0) out[0] = s[0];
}

template <bool kBuggy> TESSERA_GLOBAL void inclusive_scan(const int* in, int* out) {
  TESSERA_SHARED_ARRAY(int, s, kN);
  const unsigned t = gpu::thread_x();
  s[t] = in[t];
  gpu::sync_threads();
  for (unsigned off = 1; off < kN; off <<= 1) {
    const int add = t >= off ? s[t - off] : 0;
    if (!kBuggy) gpu::sync_threads();  // planted bug: neighbours may overwrite before we read
    s[t] += add;
    gpu::sync_threads();
  }
  out[t] = s[t];
}

}  // namespace tessera::planted
