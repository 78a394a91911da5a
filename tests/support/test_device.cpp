#include "test_device.h"

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <sstream>

namespace tessera::test {

namespace {
std::string& default_device() {
  static std::string name = "cpu";
  return name;
}
}  // namespace

void set_default_device(const std::string& name) { default_device() = name; }

Device device() {
  // The environment wins so one binary can be pointed at another device by hand.
  static const Device dev = Device::parse(std::getenv("TESSERA_TEST_DEVICE") ? std::getenv("TESSERA_TEST_DEVICE") : default_device());
  return dev;
}

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::transposed: return "transposed";
    case Layout::strided: return "strided";
    case Layout::broadcast: return "broadcast";
  }
  return "?";
}

namespace {
Tensor random_values(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  Generator gen(seed);
  if (is_floating(dtype)) return rand(shape, DType::f64, kCPU, &gen, lo, hi).to(dtype);
  if (dtype == DType::boolean) return bernoulli(shape, 0.5, DType::boolean, kCPU, &gen);
  int64_t ilo = static_cast<int64_t>(std::floor(lo)), ihi = static_cast<int64_t>(std::ceil(hi));
  if (dtype == DType::u8) ilo = std::max<int64_t>(ilo, 0);
  if (ihi <= ilo) ihi = ilo + 1;
  return randint(ilo, ihi, shape, dtype, kCPU, &gen);
}
}  // namespace

Tensor make_input(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi, Layout layout) {
  const Device dev = device();
  switch (layout) {
    case Layout::contiguous: return random_values(shape, dtype, seed, lo, hi).to(dev);
    case Layout::transposed: {
      Shape reversed(shape.rbegin(), shape.rend());
      std::vector<int64_t> order(shape.size());
      std::iota(order.rbegin(), order.rend(), 0);
      return random_values(reversed, dtype, seed, lo, hi).to(dev).permute(order);
    }
    case Layout::strided: {
      if (shape.empty()) return random_values(shape, dtype, seed, lo, hi).to(dev);
      Shape wide = shape;
      wide.back() = shape.back() * 2;
      return random_values(wide, dtype, seed, lo, hi).to(dev).slice(-1, 0, wide.back(), 2);
    }
    case Layout::broadcast: {
      if (shape.empty() || shape[0] == 0) return random_values(shape, dtype, seed, lo, hi).to(dev);
      Shape one = shape;
      one[0] = 1;
      return random_values(one, dtype, seed, lo, hi).to(dev).expand(shape);
    }
  }
  return {};
}

ref::Ref to_ref(const Tensor& t) {
  const Tensor host = t.to(kCPU).to(DType::f64).contiguous();
  const double* p = host.data<double>();
  return {t.shape(), std::vector<double>(p, p + host.numel())};
}

Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::f64: return {1e-10, 1e-12};
    case DType::f32: return {2e-5, 2e-6};
    case DType::f16: return {2e-3, 2e-4};
    case DType::bf16: return {1.6e-2, 1e-3};
    default: return {0, 0};
  }
}

ref::Ref round_to(const ref::Ref& r, DType dtype) {
  const Tensor t = from_vector(r.v, r.shape.empty() ? Shape{} : r.shape).to(dtype);
  if (is_integer(dtype)) {
    // Wrap the way C++ integer arithmetic does instead of saturating like a cast.
    ref::Ref out = r;
    for (double& v : out.v) {
      const auto i = static_cast<int64_t>(v);
      switch (dtype) {
        case DType::i8: v = static_cast<int8_t>(i); break;
        case DType::u8: v = static_cast<uint8_t>(i); break;
        case DType::i32: v = static_cast<int32_t>(i); break;
        default: v = static_cast<double>(i);
      }
    }
    return out;
  }
  return to_ref(t);
}

std::string compare(const Tensor& got, const ref::Ref& want, Tolerance tol) {
  std::ostringstream os;
  if (got.shape() != want.shape) {
    os << "shape " << shape_str(got.shape()) << " != expected " << shape_str(want.shape);
    return os.str();
  }
  const ref::Ref g = to_ref(got);
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double a = g.v[i], b = want.v[i];
    bool ok;
    if (std::isnan(b)) ok = std::isnan(a);
    else if (std::isinf(b)) ok = a == b;
    else ok = std::fabs(a - b) <= tol.atol + tol.rtol * std::fabs(b);
    if (!ok) {
      os.precision(10);
      os << "element " << i << " (of " << g.numel() << ", shape " << shape_str(got.shape()) << "): got " << a
         << ", expected " << b << " (rtol " << tol.rtol << ", atol " << tol.atol << ", dtype " << got.dtype() << ")";
      return os.str();
    }
  }
  return {};
}

std::string compare(const Tensor& got, const ref::Ref& want) { return compare(got, want, tolerance_for(got.dtype())); }

}  // namespace tessera::test
