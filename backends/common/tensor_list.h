#pragma once
// A list of up to kMaxTensors same-dtype tensors passed to one kernel by value (multi-tensor
// optimizer updates: one launch for a model's parameters instead of one per parameter).
// start[t] is the first flat element of tensor t in the list's concatenated index space.
#include <cstdint>

#include <algorithm>

#include "tessera/backend/kernel.h"
#include "tessera/tensor.h"
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

/** The AdamMultiUpdate call's tensors first .. first + kMaxTensors (inputs: k grads; outputs:
 *  k params, k exp_avg, k exp_avg_sq). */
template <class T> AdamList<T> adam_list(const KernelCall& c, size_t first) {
  const size_t k = c.inputs.size();
  AdamList<T> list{};
  list.count = static_cast<int>(std::min<size_t>(kMaxTensors, k - first));
  list.start[0] = 0;
  for (int t = 0; t < list.count; ++t) {
    const size_t i = first + static_cast<size_t>(t);
    list.g[t] = static_cast<const T*>(c.inputs[i].data_ptr());
    list.p[t] = static_cast<T*>(c.outputs[i].data_ptr());
    list.m[t] = static_cast<T*>(c.outputs[k + i].data_ptr());
    list.v[t] = static_cast<T*>(c.outputs[2 * k + i].data_ptr());
    list.start[t + 1] = list.start[t] + c.inputs[i].numel();
  }
  return list;
}

}  // namespace tessera::backend_common
