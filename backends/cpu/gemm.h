#pragma once
// Tessera's own single-precision GEMM for the CPU: C[M,N] = A[M,K] @ B[K,N], with an
// optional fused epilogue (bias per column, then an activation). A and B are read through
// arbitrary row/column strides (so transposed operands cost nothing) and may be f32, f16 or
// bf16; accumulation is always f32.
#include <cstdint>
#include <type_traits>

#include "tessera/dtype.h"
#include "tessera/kernels/half.h"
#include "tessera/kernels/activation.h"

#include "isa.h"

TESSERA_CPU_KERNELS_BEGIN

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

/** The AVX512_BF16 path of sgemm (gemm_bf16.cpp): C = A @ B when both operands are bf16 and the
 *  CPU has the instructions; returns false (nothing written) otherwise. No epilogue. With `out`
 *  the result is rounded to bf16 there (row stride ldo) and c is not written (may be null). */
bool sgemm_bf16(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b, float* c, int64_t ldc, bool parallel,
                BFloat16* out = nullptr, int64_t ldo = 0);

/** Plain double GEMM, C = A @ B (row-major C with row stride ldc), rows in parallel if asked. */
void dgemm(int64_t m, int64_t n, int64_t k, const double* a, int64_t ars, int64_t acs, const double* b, int64_t brs,
           int64_t bcs, double* c, int64_t ldc, bool parallel);

/** C = A @ B for float (packed sgemm) or double, with element strides for A and B. */
template <class T>
void gemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t ars, int64_t acs, const T* b, int64_t brs, int64_t bcs, T* c,
          int64_t ldc, bool parallel) {
  if constexpr (std::is_same_v<T, float>) {
    sgemm(m, n, k, {a, DType::f32, ars, acs}, {b, DType::f32, brs, bcs}, c, ldc, {}, parallel);
  } else {
    dgemm(m, n, k, a, ars, acs, b, brs, bcs, c, ldc, parallel);
  }
}

TESSERA_CPU_KERNELS_END
