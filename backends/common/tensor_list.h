#pragma once
// A list of up to kMaxTensors same-dtype tensors passed to one kernel by value (multi-tensor
// optimizer updates: one launch for a model's parameters instead of one per parameter).
// start[t] is the first flat element of tensor t in the list's concatenated index space.
#include <cstdint>

#include "tessera/kernels/macros.h"

namespace tessera::backend_common {

inline constexpr int kMaxTensors = 24;  // 24 x 4 pointers + offsets: ~1 KB of kernel arguments (< 4 KB)

template <class T> struct AdamList {
  T* p[kMaxTensors];
  T* m[kMaxTensors];
  T* v[kMaxTensors];
  const T* g[kMaxTensors];
  int64_t start[kMaxTensors + 1];
  int count = 0;
  /** The tensor holding flat element i (a binary search over start). */
  TESSERA_HD_INLINE int find(int64_t i) const {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (start[mid] <= i) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
};

}  // namespace tessera::backend_common
