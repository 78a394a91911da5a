#pragma once
// Helpers shared by the GPU kernel files: strided indexing passed to kernels by value, launch
// sizes, and dtype dispatch for the host-side launchers.
#include <algorithm>

#include "../common/dtype_dispatch.h"
#include "../common/indexer.h"
#include "../common/strided_loop.h"
#include "device_errors.h"
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

/** The error slot of `device` for kernels launched now (device_errors.h); the backend checks it
 *  at the next host synchronisation. Defined by each backend that builds this tree. */
DeviceErrorSlot* device_error_slot(int device);

template <class T> T* ptr(const Tensor& t) { return static_cast<T*>(t.data_ptr()); }

/** 16 bytes of T (one 128-bit transaction on NVIDIA and AMD), for vectorised loads and stores. */
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};
template <class T>
inline constexpr int kPack = sizeof(T) >= 16 ? 1 : static_cast<int>(16 / sizeof(T));
inline bool pack_aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

/** Combines v across the calling warp with `op` (butterfly: every lane gets the result). */
template <class T, class Op> TESSERA_DEVICE T warp_all_reduce(T v, Op op) {
  for (int m = warp_size() / 2; m > 0; m >>= 1) v = op(v, shfl_xor(v, m));
  return v;
}

/** Warp-per-row kernels: the calling thread's warp, the warps of the grid, and a grid giving
 *  each of `rows` rows a 32-lane warp (wider wavefronts stride over the rest). */
TESSERA_DEVICE int64_t warp_row() {
  return static_cast<int64_t>(block_x()) * (block_dim_x() / static_cast<unsigned>(warp_size())) + thread_x() / static_cast<unsigned>(warp_size());
}
TESSERA_DEVICE int64_t warp_rows_stride() { return static_cast<int64_t>(grid_dim_x()) * (block_dim_x() / static_cast<unsigned>(warp_size())); }
inline Grid warp_row_blocks(int64_t rows) { return blocks_for(rows * 32); }

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
