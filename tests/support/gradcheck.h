#pragma once
// Finite-difference gradient checks in double precision. The function's output is reduced to
// a scalar with fixed random weights, so every output element's gradient path is exercised.
#include <functional>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::test {

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

/**
 * Compares autograd gradients of f at `inputs` (f64; those with requires_grad set are
 * checked) with central differences. Returns "" when they agree within `tol`, else a
 * message naming the input, element, analytic and numeric values.
 */
std::string gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, double eps = 1e-6, double tol = 1e-6);

/** A random f64 tensor on the test device that requires grad. */
Tensor grad_input(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0);

}  // namespace tessera::test

#define TESSERA_CHECK_GRAD(...)                                      \
  do {                                                              \
    const std::string tessera_gerr_ = ::tessera::test::gradcheck(__VA_ARGS__); \
    CHECK_MESSAGE(tessera_gerr_.empty(), tessera_gerr_);            \
  } while (0)
