#pragma once
// One 16x16 output tile of C = A (m x k) @ B (k x n), with A and B read through loader
// functors and C written through a store functor. The matmul kernel reads strided matrices;
// the convolution kernels read the implicit im2col matrix straight from the input (implicit
// GEMM), so no column buffer is ever materialised.
#include "runtime.h"
#include "tessera/kernels/math.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {

inline constexpr int kTile = 16;

/** Block of kTile * kTile threads; `as`/`bs` are kTile * kTile shared arrays. */
template <class Acc, class LoadA, class LoadB, class Store>
TESSERA_DEVICE void tiled_gemm(int64_t m, int64_t n, int64_t k, int64_t tile_row, int64_t tile_col, const LoadA& load_a,
                               const LoadB& load_b, const Store& store, Acc* as, Acc* bs) {
  const int tx = static_cast<int>(thread_x() % kTile), ty = static_cast<int>(thread_x() / kTile);
  const int64_t row = tile_row * kTile + ty, col = tile_col * kTile + tx;
  Acc acc = 0;
  // Integer products wrap (kernels::wrap_t: defined, as in PyTorch) instead of overflowing.
  using W = kernels::wrap_t<Acc>;
  for (int64_t p0 = 0; p0 < k; p0 += kTile) {
    const int64_t ak = p0 + tx, bk = p0 + ty;
    as[ty * kTile + tx] = (row < m && ak < k) ? static_cast<Acc>(load_a(row, ak)) : Acc(0);
    bs[ty * kTile + tx] = (bk < k && col < n) ? static_cast<Acc>(load_b(bk, col)) : Acc(0);
    sync_threads();
    TESSERA_UNROLL
    for (int q = 0; q < kTile; ++q) acc = static_cast<Acc>(static_cast<W>(acc) + static_cast<W>(as[ty * kTile + q]) * static_cast<W>(bs[q * kTile + tx]));
    sync_threads();
  }
  if (row < m && col < n) store(row, col, acc);
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
