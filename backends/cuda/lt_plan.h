#pragma once
// What cuBLASLt is given for linear (cublaslt.cpp), decided on the host from shapes, strides and
// addresses alone, so it is unit-tested without a GPU (tests/core/cublaslt_plan_test.cpp).
//  - Leading dimensions: x [m, k] and w [n, k] are read column-major as k x m and k x n, so the
//    row stride is the leading dimension and must be >= k. A row-broadcast view (stride 0) or
//    overlapping rows cannot be expressed: such a call takes the unfused path. (Clamping the
//    stride up to k, as once done, made cuBLASLt read m rows out of a one-row buffer.) A
//    single row has no second row to reach: its leading dimension is k.
//  - Alignment: cuBLASLt's heuristic assumes 256-byte aligned operands unless told otherwise,
//    and its kernel then fails on an offset view. Each operand's alignment (the largest power of
//    two up to 256 dividing its address) goes into the preferences and into the algorithm key.
#include <cstdint>
#include <initializer_list>
#include <tuple>

namespace tessera::cublas {

struct LtOperands {
  int64_t m = 0, n = 0, k = 0;
  int64_t x_row_stride = 0, x_col_stride = 1, w_row_stride = 0, w_col_stride = 1;
  bool has_bias = false;
  int64_t bias_stride = 1;
  uintptr_t x = 0, w = 0, out = 0, bias = 0;  // addresses
};

struct LtPlan {
  bool eligible = false;
  int64_t ldx = 0, ldw = 0;
  uint32_t align_x = 0, align_w = 0, align_out = 0, align_bias = 0;
};

/** The largest power of two up to 256 that divides `address` (256 for 0). */
inline uint32_t lt_alignment(uintptr_t address) {
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

inline LtPlan plan_lt_linear(const LtOperands& o) {
  LtPlan p;
  if (o.m <= 0 || o.n <= 0 || o.k <= 0 || o.x_col_stride != 1 || o.w_col_stride != 1 || (o.has_bias && o.bias_stride != 1)) return p;
  if ((o.m > 1 && o.x_row_stride < o.k) || (o.n > 1 && o.w_row_stride < o.k)) return p;  // broadcast or overlapping rows
  p.ldx = o.m > 1 ? o.x_row_stride : o.k;
  p.ldw = o.n > 1 ? o.w_row_stride : o.k;
  for (int64_t v : {o.m, o.n, o.k, p.ldx, p.ldw}) {
    if (v > INT32_MAX) return p;
  }
  p.align_x = lt_alignment(o.x);
  p.align_w = lt_alignment(o.w);
  p.align_out = lt_alignment(o.out);
  p.align_bias = o.has_bias ? lt_alignment(o.bias) : 256;
  p.eligible = true;
  return p;
}

/** What the chosen algorithm depends on: shape, leading dimensions, type, epilogue, bias, TF32
 *  and the operands' alignments. */
using LtAlgoKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int, int, bool, bool, uint32_t, uint32_t, uint32_t, uint32_t>;

inline LtAlgoKey lt_algo_key(const LtOperands& o, const LtPlan& p, int type, int epilogue, bool tf32) {
  return {o.m, o.n, o.k, p.ldx, p.ldw, type, epilogue, o.has_bias, tf32, p.align_x, p.align_w, p.align_out, p.align_bias};
}

}  // namespace tessera::cublas
