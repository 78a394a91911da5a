#pragma once
// Helpers shared by the GPU kernel files: strided indexing passed to kernels by value, launch
// sizes, and dtype dispatch for the host-side launchers.
#include <algorithm>

#include "../common/dtype_dispatch.h"
#include "../common/indexer.h"
#include "../common/strided_loop.h"
#include "runtime.h"
#include "tessera/backend/kernel.h"
#include "tessera/tensor.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {

inline constexpr unsigned kThreads = 256;
using backend_common::Indexer;
using backend_common::make_indexer;

/** Blocks for a grid-stride loop over n elements. */
inline Grid blocks_for(int64_t n, unsigned threads = kThreads) {
  return Grid{static_cast<unsigned>(std::clamp<int64_t>((n + threads - 1) / threads, 1, 4096))};
}

template <class T> T* ptr(const Tensor& t) { return static_cast<T*>(t.data_ptr()); }

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
