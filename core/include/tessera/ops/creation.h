#pragma once
// Tensor creation. Every function takes the dtype and device last, defaulting to f32 on cpu.
#include <cstdint>
#include <vector>

#include "tessera/random.h"
#include "tessera/scalar.h"
#include "tessera/tensor.h"

namespace tessera {

/** Uninitialised tensor. */
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
Tensor full(const Shape& shape, Scalar value, DType dtype = DType::f32, Device device = kCPU);
/** Same shape/dtype/device as `like`. */
Tensor empty_like(const Tensor& like);
Tensor zeros_like(const Tensor& like);
Tensor ones_like(const Tensor& like);
Tensor full_like(const Tensor& like, Scalar value);
/** 0-d tensor holding `value`. */
Tensor scalar_tensor(Scalar value, DType dtype = DType::f32, Device device = kCPU);
/** [start, stop) in steps of `step` (like torch.arange); throws if step is 0. */
Tensor arange(double start, double stop, double step = 1.0, DType dtype = DType::f32, Device device = kCPU);
Tensor arange(int64_t stop, DType dtype = DType::i64, Device device = kCPU);
/** `steps` evenly spaced values from start to stop inclusive. */
Tensor linspace(double start, double stop, int64_t steps, DType dtype = DType::f32, Device device = kCPU);
/** n x m identity (m defaults to n). */
Tensor eye(int64_t n, int64_t m = -1, DType dtype = DType::f32, Device device = kCPU);

/** Copies host values into a new tensor of `shape` (numel must match values.size()). */
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = kCPU);
/** Same, converting the values to `dtype`. */
Tensor from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype, Device device = kCPU);

/** Uniform in [low, high). Draws from `gen` (default generator when null). */
Tensor rand(const Shape& shape, DType dtype = DType::f32, Device device = kCPU, Generator* gen = nullptr,
            double low = 0.0, double high = 1.0);
/** Normal(mean, std) by Box-Muller. */
Tensor randn(const Shape& shape, DType dtype = DType::f32, Device device = kCPU, Generator* gen = nullptr,
             double mean = 0.0, double std = 1.0);
/** Integers uniform in [low, high). */
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = DType::i64, Device device = kCPU,
               Generator* gen = nullptr);
/** 1 with probability p, else 0, in `dtype`. */
Tensor bernoulli(const Shape& shape, double p, DType dtype = DType::f32, Device device = kCPU,
                 Generator* gen = nullptr);

}  // namespace tessera
