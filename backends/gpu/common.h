#pragma once
// Helpers shared by the GPU kernel files: strided indexing passed to kernels by value, launch
// sizes, and dtype dispatch for the host-side launchers.
#include <algorithm>

#include "../common/dtype_dispatch.h"
#include "../common/strided_loop.h"
#include "runtime.h"
#include "tessera/backend/kernel.h"
#include "tessera/tensor.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {

inline constexpr int kMaxDims = 8;
inline constexpr unsigned kThreads = 256;

/** Element offsets of N operands sharing one iteration shape (dimension 0 innermost). */
template <int N> struct Indexer {
  int ndim = 0;
  bool contiguous = true;  // every operand dense: offsets equal the linear index
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  TESSERA_HD void offsets(int64_t linear, int64_t* out) const {
    for (int k = 0; k < N; ++k) out[k] = contiguous ? linear : 0;
    if (contiguous) return;
    for (int d = 0; d < ndim; ++d) {
      const int64_t c = linear % sizes[d];
      linear /= sizes[d];
      for (int k = 0; k < N; ++k) out[k] += c * strides[k][d];
    }
  }
};

/** Indexer over `shape` for tensors all having that shape (views, broadcasts allowed). */
template <int N> Indexer<N> make_indexer(const Shape& shape, const std::array<const Tensor*, N>& ts) {
  const auto plan = backend_common::make_plan<N>(shape, ts);
  TESSERA_CHECK(plan.ndim <= kMaxDims, "gpu", "tensors with ", plan.ndim, " non-mergeable axes exceed ", kMaxDims);
  Indexer<N> ix;
  ix.ndim = plan.ndim;
  for (int d = 0; d < plan.ndim; ++d) {
    ix.sizes[d] = plan.sizes[d];
    for (int k = 0; k < N; ++k) ix.strides[k][d] = plan.strides[k][d] / static_cast<int64_t>(ts[k]->itemsize());
  }
  for (int k = 0; k < N; ++k) ix.contiguous = ix.contiguous && (plan.ndim == 0 || (plan.ndim == 1 && ix.strides[k][0] == 1));
  return ix;
}

/** Blocks for a grid-stride loop over n elements. */
inline Grid blocks_for(int64_t n, unsigned threads = kThreads) {
  return Grid{static_cast<unsigned>(std::clamp<int64_t>((n + threads - 1) / threads, 1, 4096))};
}

template <class T> T* ptr(const Tensor& t) { return static_cast<T*>(t.data_ptr()); }

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
