#pragma once
// Element offsets of N operands sharing one iteration shape, passed to device kernels by value
// (GPU and Kokkos backends): the host plans the strides once, a kernel maps a linear index to
// one offset per operand.
#include <array>

#include "strided_loop.h"
#include "tessera/kernels/macros.h"
#include "tessera/tensor.h"

namespace tessera::backend_common {

inline constexpr int kMaxKernelDims = 8;

/** Element offsets of N operands sharing one iteration shape (dimension 0 innermost). */
template <int N> struct Indexer {
  int ndim = 0;
  bool contiguous = true;  // every operand dense: offsets equal the linear index
  int64_t sizes[kMaxKernelDims] = {};
  int64_t strides[N][kMaxKernelDims] = {};

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
  TESSERA_CHECK(plan.ndim <= kMaxKernelDims, "kernel", "tensors with ", plan.ndim, " non-mergeable axes exceed ", kMaxKernelDims);
  Indexer<N> ix;
  ix.ndim = plan.ndim;
  for (int d = 0; d < plan.ndim; ++d) {
    ix.sizes[d] = plan.sizes[d];
    for (int k = 0; k < N; ++k) ix.strides[k][d] = plan.strides[k][d] / static_cast<int64_t>(ts[k]->itemsize());
  }
  for (int k = 0; k < N; ++k) ix.contiguous = ix.contiguous && (plan.ndim == 0 || (plan.ndim == 1 && ix.strides[k][0] == 1));
  return ix;
}

/**
 * Offsets of a, b and out (in that order) for each batch index of a batched matmul: the batch
 * axes are all but the last two of `out`, and a and b arrive expanded to them.
 */
inline Indexer<3> matmul_batch_indexer(const Tensor& a, const Tensor& b, const Tensor& out) {
  const Tensor ab = a.slice(-1, 0, 1).slice(-2, 0, 1), bb = b.slice(-1, 0, 1).slice(-2, 0, 1), cb = out.slice(-1, 0, 1).slice(-2, 0, 1);
  Shape bshape(out.shape().begin(), out.shape().end() - 2);
  bshape.insert(bshape.end(), {1, 1});
  return make_indexer<3>(bshape, {&ab, &bb, &cb});
}

}  // namespace tessera::backend_common
