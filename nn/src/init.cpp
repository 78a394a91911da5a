#include "tessera/nn/init.h"

#include <cmath>

namespace tessera::nn::init {

Tensor kaiming_uniform(const Shape& shape, int64_t fan_in, double a, DType dtype, Device device, Generator* gen) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(std::max<int64_t>(fan_in, 1)));
  return rand(shape, dtype, device, gen, -bound, bound);
}

Tensor fan_in_uniform(const Shape& shape, int64_t fan_in, DType dtype, Device device, Generator* gen) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(fan_in, 1)));
  return rand(shape, dtype, device, gen, -bound, bound);
}

Tensor xavier_uniform(const Shape& shape, int64_t fan_in, int64_t fan_out, DType dtype, Device device, Generator* gen) {
  const double bound = std::sqrt(6.0 / static_cast<double>(std::max<int64_t>(fan_in + fan_out, 1)));
  return rand(shape, dtype, device, gen, -bound, bound);
}

}  // namespace tessera::nn::init
