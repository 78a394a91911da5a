#pragma once
// Tessera's own single-precision GEMM for the CPU: C[M,N] = A[M,K] @ B[K,N], with an
// optional fused epilogue (bias per column, then an activation). A and B are read through
// arbitrary row/column strides (so transposed operands cost nothing) and may be f32, f16 or
// bf16; accumulation is always f32.
#include <cstdint>

#include "tessera/dtype.h"
#include "tessera/kernels/activation.h"

namespace tessera::cpu {

struct GemmOperand {
  const void* data;
  DType dtype;          // f32, f16 or bf16
  int64_t row_stride;   // elements
  int64_t col_stride;   // elements
};

struct GemmEpilogue {
  const void* bias = nullptr;  // [N] of `bias_dtype`, or null
  DType bias_dtype = DType::f32;
  Activation activation = Activation::none;
};

/**
 * C (f32, row stride ldc, unit column stride) = epilogue(A @ B). `parallel` lets the call
 * use the TBB pool (batched callers that parallelise over batches pass false).
 */
void sgemm(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b, float* c, int64_t ldc,
           const GemmEpilogue& epilogue, bool parallel);

}  // namespace tessera::cpu
