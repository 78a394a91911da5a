// Tensor's method forms of the common ops (tensor.h), each the free function of the same name.
#include "tessera/tensor.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/linalg.h"
#include "tessera/ops/reduction.h"

namespace tessera {

Tensor Tensor::sum() const { return tessera::sum(*this); }
Tensor Tensor::sum(int64_t axis, bool keepdim) const { return tessera::sum(*this, {axis}, keepdim); }
Tensor Tensor::sum(const std::vector<int64_t>& axes, bool keepdim) const { return tessera::sum(*this, axes, keepdim); }
Tensor Tensor::mean() const { return tessera::mean(*this); }
Tensor Tensor::mean(int64_t axis, bool keepdim) const { return tessera::mean(*this, {axis}, keepdim); }
Tensor Tensor::mean(const std::vector<int64_t>& axes, bool keepdim) const { return tessera::mean(*this, axes, keepdim); }
Tensor Tensor::max() const { return tessera::amax(*this); }
Tensor Tensor::min() const { return tessera::amin(*this); }
Tensor Tensor::amax(int64_t axis, bool keepdim) const { return tessera::amax(*this, {axis}, keepdim); }
Tensor Tensor::amin(int64_t axis, bool keepdim) const { return tessera::amin(*this, {axis}, keepdim); }
Tensor Tensor::argmax(int64_t axis, bool keepdim) const { return tessera::argmax(*this, axis, keepdim); }
Tensor Tensor::softmax(int64_t axis) const { return tessera::softmax(*this, axis); }
Tensor Tensor::log_softmax(int64_t axis) const { return tessera::log_softmax(*this, axis); }
Tensor Tensor::matmul(const Tensor& other) const { return tessera::matmul(*this, other); }
Tensor Tensor::exp() const { return tessera::exp(*this); }
Tensor Tensor::log() const { return tessera::log(*this); }
Tensor Tensor::sqrt() const { return tessera::sqrt(*this); }
Tensor Tensor::abs() const { return tessera::abs(*this); }
Tensor Tensor::neg() const { return tessera::neg(*this); }
Tensor Tensor::relu() const { return tessera::relu(*this); }
Tensor Tensor::sigmoid() const { return tessera::sigmoid(*this); }
Tensor Tensor::tanh() const { return tessera::tanh(*this); }
Tensor Tensor::pow(double exponent) const { return tessera::pow(*this, Scalar(exponent)); }
Tensor Tensor::clamp(double lo, double hi) const { return tessera::clamp(*this, Scalar(lo), Scalar(hi)); }

}  // namespace tessera
