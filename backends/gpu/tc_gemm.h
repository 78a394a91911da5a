#pragma once
// Tensor-core GEMM for f16/bf16 operands with f32 accumulation, written once on the mma.h
// fragment API: C = act(A @ B + bias), batched, strided operands, ragged edges.
//   block: 4 warps (2 x 2), a 64 x 64 tile of C; each warp a 32 x 32 sub-tile of MMA tiles
//   K: 32-deep slabs staged through shared memory, double-buffered (the next slab is stored
//      while the warps multiply the current one: one barrier per slab)
//   global loads run along whichever axis of the operand is contiguous (coalesced for
//   row-major A, row-major B and the transposed weight of linear alike)
#include <cmath>

#include "common.h"
#include "mma.h"
#include "tessera/kernels/activation.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {

struct GemmArgs {
  int64_t m, n, k;
  int64_t ars, acs, brs, bcs, ldc;
  int64_t tiles_m, tiles_n;
  Indexer<3> batch;  // element offsets of a, b, c for each batch index
  int64_t bias_stride;
  Activation act;
};

inline constexpr int kTcBM = 64, kTcBN = 64, kTcBK = 32;
inline constexpr int kTcPadA = 8, kTcPadB = 8;  // shared-memory row padding (bank-conflict skew)

template <class Shape, class T>
TESSERA_GLOBAL void tc_gemm_kernel(const T* a, const T* b, T* c, const T* bias, GemmArgs g) {
  constexpr int kWarpM = 32, kWarpN = 32, FM = kWarpM / Shape::M, FN = kWarpN / Shape::N;
  constexpr int kThreads = 4 * Shape::Warp;
  constexpr int kStrideA = kTcBK + kTcPadA, kStrideB = kTcBN + kTcPadB;
  // Raw 16-bit storage: Half/BFloat16 have default member initialisers, which __shared__ forbids.
  TESSERA_SHARED_ARRAY(uint16_t, as, 2 * kTcBM * kStrideA);
  TESSERA_SHARED_ARRAY(uint16_t, bs, 2 * kTcBK * kStrideB);

  const int64_t tiles = g.tiles_m * g.tiles_n;
  const int64_t tile = block_x();
  const int64_t bi = tile / tiles, m0 = (tile % tiles) / g.tiles_n * kTcBM, n0 = tile % g.tiles_n * kTcBN;
  int64_t off[3];
  g.batch.offsets(bi, off);
  const T* ab = a + off[0];
  const T* bb = b + off[1];
  T* cb = c + off[2];
  const int tid = static_cast<int>(thread_x()), warp = tid / Shape::Warp, ln = lane();
  const int wm = (warp / 2) * kWarpM, wn = (warp % 2) * kWarpN;
  const bool a_k_fast = g.acs == 1, b_n_fast = g.bcs == 1 || g.brs != 1;

  const auto stage = [&](int buf, int64_t k0) {
    uint16_t* sa = as + buf * kTcBM * kStrideA;
    uint16_t* sb = bs + buf * kTcBK * kStrideB;
    for (int e = tid; e < kTcBM * kTcBK; e += kThreads) {
      const int r = a_k_fast ? e / kTcBK : e % kTcBM, q = a_k_fast ? e % kTcBK : e / kTcBM;
      const int64_t row = m0 + r, kk = k0 + q;
      sa[r * kStrideA + q] = (row < g.m && kk < g.k) ? ab[row * g.ars + kk * g.acs].bits : uint16_t{0};
    }
    for (int e = tid; e < kTcBK * kTcBN; e += kThreads) {
      const int q = b_n_fast ? e / kTcBN : e % kTcBK, col = b_n_fast ? e % kTcBN : e / kTcBK;
      const int64_t kk = k0 + q, cc = n0 + col;
      sb[q * kStrideB + col] = (kk < g.k && cc < g.n) ? bb[kk * g.brs + cc * g.bcs].bits : uint16_t{0};
    }
  };

  float acc[FM][FN][Shape::C];
  for (int i = 0; i < FM; ++i)
    for (int j = 0; j < FN; ++j)
      for (int e = 0; e < Shape::C; ++e) acc[i][j][e] = 0.0f;

  const int64_t slabs = (g.k + kTcBK - 1) / kTcBK;
  stage(0, 0);
  sync_threads();
  for (int64_t s = 0; s < slabs; ++s) {
    const int buf = static_cast<int>(s & 1);
    if (s + 1 < slabs) stage(buf ^ 1, (s + 1) * kTcBK);
    const uint16_t* sa = as + buf * kTcBM * kStrideA;
    const uint16_t* sb = bs + buf * kTcBK * kStrideB;
    for (int kk = 0; kk < kTcBK; kk += Shape::K) {
      T fa[FM][Shape::A], fb[FN][Shape::B];
      for (int i = 0; i < FM; ++i)
        for (int e = 0; e < Shape::A; ++e)
          fa[i][e] = T::from_bits(sa[(wm + i * Shape::M + Shape::a_row(ln, e)) * kStrideA + kk + Shape::a_col(ln, e)]);
      for (int j = 0; j < FN; ++j)
        for (int e = 0; e < Shape::B; ++e)
          fb[j][e] = T::from_bits(sb[(kk + Shape::b_row(ln, e)) * kStrideB + wn + j * Shape::N + Shape::b_col(ln, e)]);
      for (int i = 0; i < FM; ++i)
        for (int j = 0; j < FN; ++j) mma<Shape, T>(acc[i][j], fa[i], fb[j]);
    }
    sync_threads();
  }

  for (int i = 0; i < FM; ++i) {
    for (int j = 0; j < FN; ++j) {
      for (int e = 0; e < Shape::C; ++e) {
        const int64_t row = m0 + wm + i * Shape::M + Shape::c_row(ln, e), col = n0 + wn + j * Shape::N + Shape::c_col(ln, e);
        if (row >= g.m || col >= g.n) continue;
        float v = acc[i][j][e];
        if (bias) v += static_cast<float>(bias[col * g.bias_stride]);
        cb[row * g.ldc + col] = static_cast<T>(kernels::apply_activation(g.act, v));
      }
    }
  }
}

/** The MMA shape this device's matrix units run, or none (pre-Ampere NVIDIA, RDNA AMD). */
enum class MmaKind { none, mma_sync_16x8x16, mfma_16x16x16 };
MmaKind device_mma_kind();

/**
 * Calls f.template operator()<Shape>() with the MMA shape of this device's matrix units (each
 * vendor build instantiates only its own shape; the emulator both) and returns true, or
 * returns false without calling it when the device has none. Kernels launch 4 * Shape::Warp
 * threads per block.
 */
template <class F> bool with_mma_shape(F&& f) {
  const MmaKind kind = device_mma_kind();
#if !defined(__HIPCC__)
  if (kind == MmaKind::mma_sync_16x8x16) {
    f.template operator()<MmaSync16x8x16>();
    return true;
  }
#endif
#if !defined(__CUDACC__) || defined(__HIPCC__)
  if (kind == MmaKind::mfma_16x16x16) {
    f.template operator()<Mfma16x16x16>();
    return true;
  }
#endif
  (void)kind;
  return false;
}

/** Runs the tensor-core GEMM over `batches` batches; returns false (nothing launched) when the
 *  device has no matrix units for it, so the caller falls back to the SIMT GEMM. */
template <class T> bool run_tc_gemm(const T* a, const T* b, T* c, const T* bias, GemmArgs g, int64_t batches) {
  if (device_mma_kind() == MmaKind::none) return false;
  g.tiles_m = (g.m + kTcBM - 1) / kTcBM;
  g.tiles_n = (g.n + kTcBN - 1) / kTcBN;
  const int64_t blocks = batches * g.tiles_m * g.tiles_n;
  TESSERA_CHECK(blocks < (int64_t{1} << 31), "matmul", "problem too large for one launch");
  return with_mma_shape([&]<class Shape>() {
    launch(tc_gemm_kernel<Shape, T>, Grid{static_cast<unsigned>(blocks)}, Grid{4 * Shape::Warp}, 0, true, a, b, c, bias, g);
  });
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
