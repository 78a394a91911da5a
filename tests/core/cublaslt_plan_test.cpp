// cuBLASLt's eligibility and algorithm key for linear (backends/cuda/lt_plan.h), decided on the
// host: no GPU needed. Defects they pin: a row-broadcast input once got leading dimension
// max(stride, k) = k, so cuBLASLt read m rows out of a one-row buffer; the operands' alignments
// were neither passed to the heuristic nor in the key, so an offset view reused an algorithm
// chosen for aligned operands and failed inside cublasLtMatmul.
#include <doctest/doctest.h>

#include "cuda/lt_plan.h"

using namespace tessera::cublas;

namespace {
LtOperands contiguous(int64_t m, int64_t n, int64_t k) {
  LtOperands o;
  o.m = m, o.n = n, o.k = k;
  o.x_row_stride = k, o.w_row_stride = k;
  o.x = 0x10000, o.w = 0x20000, o.out = 0x30000;
  return o;
}
}  // namespace

TEST_CASE("cuBLASLt plan: contiguous operands use their row strides as leading dimensions") {
  LtOperands o = contiguous(4, 8, 16);
  o.x_row_stride = 24;  // a column slice of a wider matrix
  const LtPlan p = plan_lt_linear(o);
  REQUIRE(p.eligible);
  CHECK(p.ldx == 24);
  CHECK(p.ldw == 16);
  CHECK(p.align_x == 256);
}

TEST_CASE("cuBLASLt plan: a row-broadcast or overlapping input takes the unfused path") {
  LtOperands o = contiguous(4, 8, 16);
  o.x_row_stride = 0;  // expand() of one row to 4
  CHECK_FALSE(plan_lt_linear(o).eligible);
  o.x_row_stride = 8;  // rows overlap
  CHECK_FALSE(plan_lt_linear(o).eligible);
  o = contiguous(4, 8, 16);
  o.w_row_stride = 0;
  CHECK_FALSE(plan_lt_linear(o).eligible);
  // One row has no second row to reach: any stride is fine, its leading dimension is k.
  o = contiguous(1, 8, 16);
  o.x_row_stride = 0;
  const LtPlan single = plan_lt_linear(o);
  REQUIRE(single.eligible);
  CHECK(single.ldx == 16);
  // Non-unit inner strides and strided bias are refused as before.
  o = contiguous(4, 8, 16);
  o.x_col_stride = 2;
  CHECK_FALSE(plan_lt_linear(o).eligible);
  o = contiguous(4, 8, 16);
  o.has_bias = true, o.bias_stride = 0, o.bias = 0x40000;
  CHECK_FALSE(plan_lt_linear(o).eligible);
}

TEST_CASE("cuBLASLt plan: alignments are measured and keyed") {
  CHECK(lt_alignment(0) == 256);
  CHECK(lt_alignment(0x1000) == 256);
  CHECK(lt_alignment(0x1004) == 4);
  CHECK(lt_alignment(0x1002) == 2);
  CHECK(lt_alignment(0x1080) == 128);
  LtOperands aligned = contiguous(4, 8, 16), offset = aligned;
  offset.x += 4;  // x.slice(1, 1, ...) of a float tensor: 4 bytes in
  const LtPlan pa = plan_lt_linear(aligned), po = plan_lt_linear(offset);
  REQUIRE(pa.eligible);
  REQUIRE(po.eligible);
  CHECK(po.align_x == 4);
  CHECK(lt_algo_key(aligned, pa, 0, 0, false) != lt_algo_key(offset, po, 0, 0, false));
  CHECK(lt_algo_key(aligned, pa, 0, 0, false) == lt_algo_key(aligned, plan_lt_linear(aligned), 0, 0, false));
}
