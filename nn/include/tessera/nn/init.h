#pragma once
// Parameter initialisation like PyTorch's defaults, drawn from a Philox generator (the
// default generator unless one is given) so a seed reproduces a model on every backend.
#include "tessera/tessera.h"

namespace tessera::nn::init {

/** PyTorch's `a` for Linear and Conv weights (kaiming_uniform with a = sqrt(5)). */
inline constexpr double kDefaultA = 2.2360679774997896964;

/** U(-bound, bound) with bound = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)). */
Tensor kaiming_uniform(const Shape& shape, int64_t fan_in, double a, DType dtype, Device device, Generator* gen = nullptr);
/** U(-1 / sqrt(fan_in), 1 / sqrt(fan_in)) — PyTorch's bias default. */
Tensor fan_in_uniform(const Shape& shape, int64_t fan_in, DType dtype, Device device, Generator* gen = nullptr);
/** U(-b, b) with b = sqrt(6 / (fan_in + fan_out)). */
Tensor xavier_uniform(const Shape& shape, int64_t fan_in, int64_t fan_out, DType dtype, Device device, Generator* gen = nullptr);

}  // namespace tessera::nn::init
