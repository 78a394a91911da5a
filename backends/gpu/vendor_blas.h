#pragma once
// Host-side glue between Tessera's matmul/linear and a vendor BLAS (cuBLAS, rocBLAS), written
// once: row-major operands are passed as the column-major product C^T = B^T A^T; layouts a
// BLAS cannot express (no unit stride inside a matrix, batch axes that do not flatten to one
// stride, sizes beyond int) return false so the caller runs Tessera's own kernel. The vendor
// file supplies only the strided-batched GEMM call.
#include <algorithm>
#include <climits>
#include <initializer_list>

#include "../common/indexer.h"
#include "tessera/backend/kernel.h"
#include "tessera/tensor.h"

namespace tessera::vendor_blas {
using backend_common::Indexer;

enum class Op { N, T };

/** One column-major strided-batched GEMM: C[batch] (m x n, ldc) = op(A) op(B). */
struct Gemm {
  Op op_a, op_b;
  int m, n, k;
  const void* a;
  int lda;
  int64_t stride_a;
  const void* b;
  int ldb;
  int64_t stride_b;
  void* c;
  int ldc;
  int64_t stride_c;
  int batch;
  DType dtype;
  int device;
};
/** Runs the GEMM; false when the vendor library has no kernel for the dtype. */
using GemmFn = bool (*)(const Gemm&);

namespace detail {
// A row-major [rows, cols] operand with strides (rs, cs), seen as the column-major transpose.
struct Operand {
  Op op = Op::N;
  int64_t ld = 0;
  bool ok = false;
};
inline Operand operand(int64_t rs, int64_t cs, int64_t rows, int64_t cols) {
  if (cs == 1 && (rows == 1 || rs >= cols)) return {Op::N, std::max<int64_t>({rs, cols, 1}), true};
  if (rs == 1 && (cols == 1 || cs >= rows)) return {Op::T, std::max<int64_t>({cs, rows, 1}), true};
  return {};
}
inline bool fits(std::initializer_list<int64_t> v) {
  for (int64_t x : v) {
    if (x < 0 || x > INT_MAX) return false;
  }
  return true;
}
}  // namespace detail

/** Row-major C [batch, m, n] (contiguous) = A [batch, m, k] @ B [batch, k, n]; false when unsupported. */
inline bool gemm(GemmFn vendor, int device, DType dt, int64_t m, int64_t n, int64_t k, const void* a, int64_t ars, int64_t acs,
                 int64_t a_bs, const void* b, int64_t brs, int64_t bcs, int64_t b_bs, void* c, int64_t batch) {
  const detail::Operand oa = detail::operand(ars, acs, m, k), ob = detail::operand(brs, bcs, k, n);
  if (!oa.ok || !ob.ok || !detail::fits({m, n, k, oa.ld, ob.ld, batch})) return false;
  const Gemm g{ob.op, oa.op, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), b, static_cast<int>(ob.ld), b_bs, a,
               static_cast<int>(oa.ld), a_bs, c, static_cast<int>(n), m * n, static_cast<int>(batch), dt, device};
  return vendor(g);
}

/** matmul through the vendor GEMM when its batch axes flatten to one stride per operand. */
inline bool matmul(GemmFn vendor, const KernelCall& call) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  Tensor& out = call.outputs[0];
  const int64_t r = out.dim();
  const Indexer<3> batch = backend_common::matmul_batch_indexer(a, b, out);
  if (batch.ndim > 1) return false;
  const int64_t a_bs = batch.ndim ? batch.strides[0][0] : 0, b_bs = batch.ndim ? batch.strides[1][0] : 0;
  const int64_t m = out.shape()[r - 2], n = out.shape()[r - 1], k = a.shape()[r - 1];
  return gemm(vendor, out.device().index, a.dtype(), m, n, k, a.data_ptr(), a.strides()[r - 2], a.strides()[r - 1], a_bs, b.data_ptr(),
              b.strides()[r - 2], b.strides()[r - 1], b_bs, out.data_ptr(), out.numel() / std::max<int64_t>(m * n, 1));
}

/** out = x w^T through the vendor GEMM (no epilogue: the caller applies bias and activation). */
inline bool linear_product(GemmFn vendor, const KernelCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  Tensor& out = call.outputs[0];
  const int64_t m = x.shape()[0], k = x.shape()[1], n = w.shape()[0];
  // B = w^T read in place: walking k moves along w's columns, n along its rows.
  return gemm(vendor, out.device().index, x.dtype(), m, n, k, x.data_ptr(), x.strides()[0], x.strides()[1], 0, w.data_ptr(),
              w.strides()[1], w.strides()[0], 0, out.data_ptr(), 1);
}

}  // namespace tessera::vendor_blas
