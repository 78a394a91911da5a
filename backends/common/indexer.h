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

/** A binary op's operands as a dense one and a broadcast one over [rows, cols] (see
 *  `dense_with_broadcast`); `found` is false for every other layout. */
struct DenseWithBroadcast {
  bool found = false, row_of_cols = false;  // the broadcast operand: a row of cols, or a column of rows
  int64_t rows = 0, cols = 0;
  const Tensor *dense = nullptr, *bcast = nullptr;
};

/** Recognises, from the indexer of {out, a, b}, a dense out and operand with the other operand
 *  broadcast as a row (`x + b[None, :]`, a bias), a column (`x + b[:, None]`) or a scalar. */
inline DenseWithBroadcast dense_with_broadcast(const Indexer<3>& ix, const Tensor& a, const Tensor& b) {
  DenseWithBroadcast r;
  if (ix.contiguous || ix.ndim < 1 || ix.ndim > 2) return r;
  const int64_t cols = ix.sizes[0], rows = ix.ndim == 2 ? ix.sizes[1] : 1;
  const auto is = [&](int k, int64_t inner, int64_t outer) {
    return ix.strides[k][0] == inner && (ix.ndim == 1 || ix.strides[k][1] == outer);
  };
  if (cols <= 0 || rows <= 0 || !is(0, 1, cols)) return r;
  for (int dense = 1; dense <= 2; ++dense) {
    const int other = 3 - dense;
    if (!is(dense, 1, cols)) continue;
    const bool row = ix.ndim == 2 && is(other, 1, 0), column = is(other, 0, ix.ndim == 2 ? 1 : 0);
    if (!row && !column) continue;
    r.found = true;
    r.row_of_cols = row;
    r.rows = rows;
    r.cols = cols;
    r.dense = dense == 1 ? &a : &b;
    r.bcast = dense == 1 ? &b : &a;
    return r;
  }
  return r;
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
