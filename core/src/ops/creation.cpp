#include "tessera/ops/creation.h"

#include <cmath>
#include <cstring>

#include "dispatch.h"
#include "tessera/autograd.h"
#include "tessera/backend/registry.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduction.h"

namespace tessera {

namespace {
void check_shape(const Shape& shape, const char* op) {
  for (int64_t s : shape) TESSERA_CHECK(s >= 0, op, "negative size in shape ", shape_str(shape));
}

// A host staging buffer of n doubles; a request the host cannot meet is OutOfMemory naming the
// op, not std::bad_alloc.
std::vector<double> host_values(int64_t n, const char* op) {
  checked_nbytes({n}, sizeof(double), op);
  try {
    return std::vector<double>(static_cast<size_t>(n), 0.0);
  } catch (const std::exception&) {
    throw OutOfMemory(detail::concat(op, ": cannot allocate ", n, " values on the host"));
  }
}

// Builds a tensor from host memory holding `numel` contiguous elements of `dtype`.
Tensor from_host_bytes(const void* src, const Shape& shape, DType dtype, Device device) {
  Tensor out = empty(shape, dtype, device);
  if (out.nbytes() == 0) return out;
  Backend& b = backend_for_device(device, "from_vector");
  if (b.host_accessible()) {
    std::memcpy(out.data_ptr(), src, out.nbytes());
  } else {
    b.copy_from_host(out.data_ptr(), src, out.nbytes(), device.index);
  }
  return out;
}
}  // namespace

Tensor empty(const Shape& shape, DType dtype, Device device) {
  const auto nbytes = static_cast<size_t>(checked_nbytes(shape, itemsize(dtype), "empty"));
  auto storage = std::make_shared<Storage>(device, nbytes);
  return detail::make_tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor full(const Shape& shape, Scalar value, DType dtype, Device device) {
  Tensor out = empty(shape, dtype, device);
  return out.fill_(value.to_double());
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1, dtype, device); }
Tensor empty_like(const Tensor& like) { return empty(like.shape(), like.dtype(), like.device()); }
Tensor zeros_like(const Tensor& like) { return zeros(like.shape(), like.dtype(), like.device()); }
Tensor ones_like(const Tensor& like) { return ones(like.shape(), like.dtype(), like.device()); }
Tensor full_like(const Tensor& like, Scalar value) { return full(like.shape(), value, like.dtype(), like.device()); }
Tensor scalar_tensor(Scalar value, DType dtype, Device device) { return full({}, value, dtype, device); }

Tensor& Tensor::fill_(double value) {
  TESSERA_CHECK(!grad_enabled() || !requires_grad(), "fill_",
                "in-place ops on tensors that require grad are not recorded; run them under NoGradGuard");
  if (numel() == 0) return *this;
  OpAttrs attrs;
  attrs.value = value;
  detail::run_kernel(OpId::Fill, device(), {}, std::span<Tensor>(this, 1), attrs);
  return *this;
}

Tensor arange(double start, double stop, double step, DType dtype, Device device) {
  TESSERA_CHECK(step != 0, "arange", "step must be nonzero");
  TESSERA_CHECK(std::isfinite(start) && std::isfinite(stop), "arange", "start and stop must be finite");
  const double count = std::ceil((stop - start) / step);
  // Converting a double beyond int64's range is undefined behaviour: check first.
  TESSERA_CHECK(!(count >= 0x1p62), "arange", "[", start, ", ", stop, ") in steps of ", step, " has too many elements");
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  checked_nbytes({n}, itemsize(dtype), "arange");
  if (device != kCPU) {
    // Built on the device (an exact integer scan, then start + i * step in f64 as below), so
    // arange in a GPU training step (class indices in cross_entropy's backward) needs no upload
    // and no host sync.
    const Tensor index = sub(cumsum(ones({n}, DType::i64, device), 0), 1);
    if (start == 0 && step == 1) return index.to(dtype);
    return add(mul(index.to(DType::f64), step), start).to(dtype);
  }
  std::vector<double> values = host_values(n, "arange");
  for (int64_t i = 0; i < n; ++i) values[i] = start + static_cast<double>(i) * step;
  return from_doubles(values, {n}, dtype, device);
}

Tensor arange(int64_t stop, DType dtype, Device device) { return arange(0.0, static_cast<double>(stop), 1.0, dtype, device); }

Tensor linspace(double start, double stop, int64_t steps, DType dtype, Device device) {
  TESSERA_CHECK(steps >= 0, "linspace", "steps must be >= 0, got ", steps);
  std::vector<double> values = host_values(steps, "linspace");
  const double delta = steps > 1 ? (stop - start) / static_cast<double>(steps - 1) : 0.0;
  // Fill from both ends (like PyTorch) so the last value is exactly `stop`.
  for (int64_t i = 0; i < steps; ++i) {
    values[i] = i < steps / 2 ? start + delta * static_cast<double>(i) : stop - delta * static_cast<double>(steps - 1 - i);
  }
  return from_doubles(values, {steps}, dtype, device);
}

Tensor eye(int64_t n, int64_t m, DType dtype, Device device) {
  if (m < 0) m = n;
  TESSERA_CHECK(n >= 0, "eye", "n must be >= 0, got ", n);
  std::vector<double> values = host_values(checked_numel({n, m}, "eye"), "eye");
  for (int64_t i = 0; i < std::min(n, m); ++i) values[i * m + i] = 1.0;
  return from_doubles(values, {n, m}, dtype, device);
}

template <class T> Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  check_shape(shape, "from_vector");
  TESSERA_CHECK(static_cast<int64_t>(values.size()) == numel(shape), "from_vector", values.size(),
                " values do not fill shape ", shape_str(shape));
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(values.begin(), values.end());  // vector<bool> is bit-packed
    return from_host_bytes(bytes.data(), shape, DType::boolean, device);
  } else {
    return from_host_bytes(values.data(), shape, dtype_of_v<T>, device);
  }
}
template Tensor from_vector(const std::vector<float>&, const Shape&, Device);
template Tensor from_vector(const std::vector<double>&, const Shape&, Device);
template Tensor from_vector(const std::vector<Half>&, const Shape&, Device);
template Tensor from_vector(const std::vector<BFloat16>&, const Shape&, Device);
template Tensor from_vector(const std::vector<int8_t>&, const Shape&, Device);
template Tensor from_vector(const std::vector<uint8_t>&, const Shape&, Device);
template Tensor from_vector(const std::vector<int32_t>&, const Shape&, Device);
template Tensor from_vector(const std::vector<int64_t>&, const Shape&, Device);
template Tensor from_vector(const std::vector<bool>&, const Shape&, Device);

Tensor from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype, Device device) {
  // Build in f64 on the host and let the copy kernel convert (one conversion rule everywhere).
  Tensor host = from_vector(values, shape, kCPU);
  return cast(host, dtype).to(device);
}

namespace {
Tensor random_op(OpId op, const Shape& shape, DType dtype, Device device, Generator* gen, const RandomAttrs& params) {
  Generator& g = gen ? *gen : default_generator();
  Tensor out = empty(shape, dtype, device);
  OpAttrs attrs;
  attrs.random = params;
  attrs.seed = g.seed();
  attrs.offset = g.next_offset();
  if (out.numel() > 0) detail::run_kernel(op, device, {}, std::span<Tensor>(&out, 1), attrs);
  return out;
}
}  // namespace

Tensor rand(const Shape& shape, DType dtype, Device device, Generator* gen, double low, double high) {
  TESSERA_CHECK(is_floating(dtype), "rand", "expected a floating dtype, got ", dtype);
  TESSERA_CHECK(low <= high, "rand", "low ", low, " must be <= high ", high);
  return random_op(OpId::RandUniform, shape, dtype, device, gen, RandomAttrs{.low = low, .high = high});
}

Tensor randn(const Shape& shape, DType dtype, Device device, Generator* gen, double mean, double std) {
  TESSERA_CHECK(is_floating(dtype), "randn", "expected a floating dtype, got ", dtype);
  TESSERA_CHECK(std >= 0, "randn", "std must be >= 0, got ", std);
  return random_op(OpId::RandNormal, shape, dtype, device, gen, RandomAttrs{.mean = mean, .stddev = std});
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype, Device device, Generator* gen) {
  TESSERA_CHECK(low < high, "randint", "low ", low, " must be < high ", high);
  // The bounds travel as doubles and the kernels take high - low: keep both exact.
  int64_t span = 0;
  TESSERA_CHECK(!__builtin_sub_overflow(high, low, &span) && span <= (int64_t{1} << 53) && low >= -(int64_t{1} << 53) &&
                    high <= (int64_t{1} << 53),
                "randint", "[", low, ", ", high, ") must lie within +-2^53");
  TESSERA_CHECK(dtype != DType::boolean, "randint", "dtype bool is not supported");
  return random_op(OpId::RandInt, shape, dtype, device, gen,
                   RandomAttrs{.low = static_cast<double>(low), .high = static_cast<double>(high)});
}

Tensor bernoulli(const Shape& shape, double p, DType dtype, Device device, Generator* gen) {
  TESSERA_CHECK(p >= 0 && p <= 1, "bernoulli", "p must be in [0, 1], got ", p);
  return random_op(OpId::Bernoulli, shape, dtype, device, gen, RandomAttrs{.p = p});
}

}  // namespace tessera
