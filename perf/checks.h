#pragma once
// The benchmark's correctness gate: before a case is timed, its op runs once and the result is
// compared with a reference computed in double on the host from the same inputs, at sampled
// positions (every position of a small result). A case that differs is reported "wrong" and
// not timed, so a broken kernel can never show up as a fast one.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::bench {

/** |got - ref| <= atol + rtol |ref| + sum_rtol * scale, where the reference may give a scale
 *  (the sum of |terms| of a dot product: rounding error grows with it, not with the result). */
struct Tolerance {
  double rtol = 1e-5, atol = 1e-6, sum_rtol = 0;
};

/** The reference value at flat position i (row-major over the result's shape); may set *scale. */
using Reference = std::function<double(int64_t i, double* scale)>;
/** A case's check: an error message when wrong, nothing when right. */
using Check = std::function<std::optional<std::string>()>;

/** The host copy of a tensor, as doubles in row-major order. */
std::vector<double> host_values(const Tensor& t);
/** Compares `got` with `ref` at up to `samples` positions (deterministic, first and last included). */
std::optional<std::string> compare_sampled(const Tensor& got, const Reference& ref, Tolerance tol, int64_t samples = 2048);

/** y = op(x) against ref(x) elementwise. */
Check unary_check(Tensor x, std::function<Tensor(const Tensor&)> op, double (*ref)(double), Tolerance tol = {});
/** y = op(a, b) (b broadcast over a's rows when it is 1-D) against ref(a, b). */
Check binary_check(Tensor a, Tensor b, std::function<Tensor(const Tensor&, const Tensor&)> op, double (*ref)(double, double),
                   Tolerance tol = {});
/** y = a @ b^T_if(transpose_b) (+ bias, then relu when `relu`) against dot products in double. */
Check matmul_check(Tensor a, Tensor b, bool transpose_b, Tensor bias, bool relu, std::function<Tensor()> op, Tolerance tol);

/** Environment TESSERA_BENCH_PLANT_WRONG=<op> or <backend>:<op>: that kernel scales its output
 *  by 1.01 (plant_wrong_kernel; the gate's own test: the case must come out "wrong"). */
void plant_wrong_kernel_from_env();

}  // namespace tessera::bench
