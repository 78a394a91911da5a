// Elementwise ops against the double reference: every op, every dtype it supports, every
// memory layout, broadcasting, scalars, size-0 and size-1 axes, and outputs written into
// views of a sentinel-filled buffer (nothing outside the view may change).
#include <cmath>
#include <limits>

#include "support/checks.h"

using namespace tessera;
using namespace tessera::test;

namespace {
struct UnaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&);
  double lo, hi;
  bool float_only;
};
Tensor gelu_erf(const Tensor& x) { return gelu(x, false); }
Tensor gelu_tanh(const Tensor& x) { return gelu(x, true); }
Tensor elu_default(const Tensor& x) { return elu(x); }

const UnaryCase kUnary[] = {
    {"neg", &neg, -3, 3, false},          {"abs", &tessera::abs, -3, 3, false},
    {"sign", &sign, -3, 3, false},        {"square", &square, -3, 3, false},
    {"relu", &relu, -3, 3, false},        {"floor", &tessera::floor, -3, 3, false},
    {"ceil", &tessera::ceil, -3, 3, false}, {"round", &tessera::round, -3, 3, false},
    {"exp", &tessera::exp, -3, 3, true},  {"expm1", &tessera::expm1, -3, 3, true},
    {"log", &tessera::log, 0.1, 4, true}, {"log1p", &tessera::log1p, -0.9, 4, true},
    {"sqrt", &tessera::sqrt, 0, 4, true}, {"rsqrt", &rsqrt, 0.1, 4, true},
    {"reciprocal", &reciprocal, 0.25, 4, true}, {"sin", &tessera::sin, -3, 3, true},
    {"cos", &tessera::cos, -3, 3, true},  {"tanh", &tessera::tanh, -3, 3, true},
    {"sigmoid", &sigmoid, -6, 6, true},   {"gelu", &gelu_erf, -3, 3, true},
    {"gelu_tanh", &gelu_tanh, -3, 3, true}, {"silu", &silu, -3, 3, true},
    {"softplus", &softplus, -5, 5, true}, {"erf", &tessera::erf, -2, 2, true},
    {"trunc", &tessera::trunc, -3, 3, false}, {"tan", &tessera::tan, -1.2, 1.2, true},
    {"asin", &tessera::asin, -0.95, 0.95, true}, {"acos", &tessera::acos, -0.95, 0.95, true},
    {"atan", &tessera::atan, -3, 3, true}, {"log2", &tessera::log2, 0.1, 4, true},
    {"exp2", &tessera::exp2, -3, 3, true}, {"mish", &mish, -3, 3, true},
    {"hardswish", &hardswish, -5, 5, true}, {"hardsigmoid", &hardsigmoid, -5, 5, true},
    {"elu", &elu_default, -3, 3, true},   {"selu", &selu, -3, 3, true},
    {"log10", &tessera::log10, 0.1, 4, true}, {"sinh", &tessera::sinh, -3, 3, true},
    {"cosh", &tessera::cosh, -3, 3, true}, {"asinh", &tessera::asinh, -30, 30, true},
    {"acosh", &tessera::acosh, 1, 30, true}, {"atanh", &tessera::atanh, -0.95, 0.95, true},
};

const Shape kShapes[] = {{17}, {3, 5}, {2, 3, 4}, {1, 7}, {4, 1}, {0, 3}, {}};

Tolerance loose_for(DType dt, const char* op) {
  Tolerance t = tolerance_for(dt);
  // Functions with large derivatives magnify the input's rounding; inputs here are exact in
  // dtype, so only the compute precision matters, but f32 libm is a few ulp.
  if (dt == DType::f32) t = {1e-5, 1e-6};
  (void)op;
  return t;
}
}  // namespace

TEST_CASE("unary ops match the reference on every float dtype and layout") {
  uint64_t seed = 1;
  for (const UnaryCase& c : kUnary) {
    for (DType dt : kFloatTypes) {
      for (Layout layout : kLayouts) {
        for (const Shape& shape : kShapes) {
          CAPTURE(c.name);
          CAPTURE(dtype_name(dt));
          CAPTURE(layout_name(layout));
          CAPTURE(shape_str(shape));
          const Tensor x = make_input(shape, dt, ++seed, c.lo, c.hi, layout);
          const Tensor y = c.fn(x);
          CHECK(y.dtype() == dt);
          CHECK(y.device() == device());
          const ref::Ref want = round_to(ref::map(to_ref(x), [&](double v) { return ref::unary(c.name, v); }), dt);
          TESSERA_CHECK_CLOSE(y, want, loose_for(dt, c.name));
        }
      }
    }
  }
}

TEST_CASE("unary ops on integers: numeric ops keep the dtype, float ops give float32") {
  uint64_t seed = 100;
  for (const UnaryCase& c : kUnary) {
    for (DType dt : kIntTypes) {
      CAPTURE(c.name);
      CAPTURE(dtype_name(dt));
      const Tensor x = make_input({5, 6}, dt, ++seed, c.float_only ? std::max(c.lo, 1.0) : -20, c.float_only ? 4 : 20,
                                  Layout::transposed);
      const Tensor y = c.fn(x);
      const DType want_dt = c.float_only ? DType::f32 : dt;
      CHECK(y.dtype() == want_dt);
      const ref::Ref want = round_to(ref::map(to_ref(x), [&](double v) { return ref::unary(c.name, v); }), want_dt);
      TESSERA_CHECK_CLOSE(y, want, c.float_only ? Tolerance{1e-5, 1e-6} : Tolerance{0, 0});
    }
  }
}

TEST_CASE("unary ops handle special values like the reference") {
  const std::vector<double> specials = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-30, -1e30, 88.0, -88.0, 0.5, 1.5, 2.5};
  for (const UnaryCase& c : kUnary) {
    CAPTURE(c.name);
    const Tensor x = from_vector(specials, {static_cast<int64_t>(specials.size())}).to(device());
    const ref::Ref want = ref::map(to_ref(x), [&](double v) { return ref::unary(c.name, v); });
    TESSERA_CHECK_CLOSE(c.fn(x), want, Tolerance{1e-12, 1e-300});
  }
}

// In f32 on every backend (the CPU's vectorised kernels included): an AVX-512 CPU gave
// gelu(-inf) = -inf where the others and PyTorch give NaN, about -1e-6 at x = -100 where PyTorch
// gives -0, and a tanh-GELU gradient of -1.4e-6 at -5.7 where PyTorch gives -8.4e-9. One answer
// everywhere: PyTorch's.
TEST_CASE("GELU's special values and far tails are PyTorch's on every backend, in f32 too") {
  const std::vector<float> xs = {-INFINITY, -100.0f, -88.7f, -20.0f, -5.7f, -1.0f, 0.0f, 1.0f, 5.7f, 100.0f, INFINITY, NAN};
  const auto n = static_cast<int64_t>(xs.size());
  for (bool approx : {false, true}) {
    CAPTURE(approx);
    const auto ref_y = [&](double x) {
      return approx ? 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) : 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    };
    const auto ref_dy = [&](double x) {
      if (!approx) return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) * 0.3989422804014327;
      const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = std::tanh(u);
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
    };
    Tensor x = from_vector<float>(xs, {n}).to(device()).set_requires_grad();
    const Tensor y = gelu(x, approx);
    y.backward(ones({n}, DType::f32, device()));
    const std::vector<float> got = y.to_vector<float>(), grad = x.grad().to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i) {
      CAPTURE(xs[i]);
      const double x0 = xs[i];
      if (std::isnan(x0) || x0 == -INFINITY) {  // -inf: x * 0 is NaN, as PyTorch computes it
        CHECK(std::isnan(got[i]));
        continue;
      }
      if (x0 == INFINITY) {
        CHECK(got[i] == INFINITY);
        continue;
      }
      CHECK(std::fabs(got[i] - ref_y(x0)) <= 2e-7 * std::max(1.0, std::fabs(ref_y(x0))));
      CHECK(std::fabs(grad[i] - ref_dy(x0)) <= 2e-8 + 2e-6 * std::fabs(ref_dy(x0)));
    }
  }
}

namespace {
struct BinaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&, const Tensor&);
  enum { arith, truediv, compare, logical } kind;
};
const BinaryCase kBinary[] = {
    {"add", &add, BinaryCase::arith},         {"sub", &sub, BinaryCase::arith},
    {"mul", &mul, BinaryCase::arith},         {"div", &div, BinaryCase::truediv},
    {"pow", &tessera::pow, BinaryCase::arith}, {"maximum", &maximum, BinaryCase::arith},
    {"minimum", &minimum, BinaryCase::arith}, {"eq", &eq, BinaryCase::compare},
    {"ne", &ne, BinaryCase::compare},         {"lt", &lt, BinaryCase::compare},
    {"le", &le, BinaryCase::compare},         {"gt", &gt, BinaryCase::compare},
    {"ge", &ge, BinaryCase::compare},         {"logical_and", &logical_and, BinaryCase::logical},
    {"logical_or", &logical_or, BinaryCase::logical}, {"logical_xor", &logical_xor, BinaryCase::logical},
    {"atan2", &tessera::atan2, BinaryCase::truediv}, {"fmod", &tessera::fmod, BinaryCase::arith},
    {"remainder", &remainder, BinaryCase::arith}, {"floor_divide", &floor_divide, BinaryCase::arith},
};
}  // namespace

TEST_CASE("binary ops match the reference across dtypes, layouts and broadcasting") {
  const std::pair<Shape, Shape> shapes[] = {
      {{4, 5}, {4, 5}}, {{4, 5}, {5}}, {{3, 1, 5}, {1, 4, 1}}, {{6}, {}}, {{}, {6}}, {{0, 3}, {3}}, {{2, 1}, {2, 0}}};
  std::vector<DType> dtypes = kFloatTypes;
  dtypes.insert(dtypes.end(), kIntTypes.begin(), kIntTypes.end());
  uint64_t seed = 1000;
  for (const BinaryCase& c : kBinary) {
    for (DType dt : dtypes) {
      for (const auto& [sa, sb] : shapes) {
        for (Layout layout : kLayouts) {
          CAPTURE(c.name);
          CAPTURE(dtype_name(dt));
          CAPTURE(shape_str(sa));
          CAPTURE(shape_str(sb));
          CAPTURE(layout_name(layout));
          const bool is_pow = std::string(c.name) == "pow";
          const double lo = is_pow ? (is_floating(dt) ? 0.1 : 0) : -4, hi = is_pow ? 3 : 4;
          const Tensor a = make_input(sa, dt, ++seed, lo, hi, layout);
          // Small integer range makes equal pairs likely, so comparisons see ties.
          Tensor b = make_input(sb, dt, ++seed, is_pow ? 0 : lo, hi, Layout::contiguous);
          const std::string name = c.name;
          const bool divides = name == "fmod" || name == "remainder" || name == "floor_divide";
          if ((name == "div" && !is_floating(dt)) || divides) b = where(eq(b, 0), full_like(b, 3), b);
          const Tensor y = c.fn(a, b);
          DType want_dt = dt;
          if (c.kind == BinaryCase::truediv) want_dt = to_floating(dt);
          if (c.kind == BinaryCase::compare || c.kind == BinaryCase::logical) want_dt = DType::boolean;
          CHECK(y.dtype() == want_dt);
          ref::Ref want = ref::map2(to_ref(a), to_ref(b), [&](double x, double z) { return ref::binary(c.name, x, z); });
          want = round_to(want, want_dt);
          Tolerance tol = tolerance_for(want_dt);
          if (want_dt == DType::f32) tol = {1e-5, 1e-6};
          TESSERA_CHECK_CLOSE(y, want, tol);
        }
      }
    }
  }
}

TEST_CASE("scalar operands follow PyTorch's weak typing") {
  const Tensor i = from_vector<int32_t>({1, 2, 3}, {3}).to(device());
  const Tensor h = from_vector<float>({1, 2, 3}, {3}).to(device()).to(DType::f16);
  CHECK(add(i, 2).dtype() == DType::i32);
  CHECK(add(i, 2.5).dtype() == DType::f32);
  CHECK(mul(h, 2.5).dtype() == DType::f16);
  CHECK(div(i, 2).dtype() == DType::f32);
  CHECK((i * 2 + 1).to_vector<int32_t>() == std::vector<int32_t>{3, 5, 7});
  CHECK((10 - i).to_vector<int32_t>() == std::vector<int32_t>{9, 8, 7});
  CHECK((1.0 / h).to_vector<float>() == std::vector<float>{1.0f, 0.5f, static_cast<float>(Half(1.0f / 3))});
  CHECK(gt(i, 1).to_vector<bool>() == std::vector<bool>{false, true, true});
  CHECK(promote_types(DType::i32, DType::f16) == DType::f16);
  CHECK(add(i, h).dtype() == DType::f16);
}

TEST_CASE("where, clamp, lerp and isnan") {
  const Tensor x = make_input({4, 6}, DType::f32, 7, -3, 3, Layout::transposed);
  const Tensor y = make_input({6}, DType::f32, 8, -3, 3);
  const Tensor c = gt(x, 0);
  TESSERA_CHECK_CLOSE(where(c, x, y), ref::map3(to_ref(c), to_ref(x), to_ref(y), [](double k, double a, double b) {
                        return k != 0 ? a : b;
                      }));
  TESSERA_CHECK_CLOSE(where(c, x, 0.5), ref::map2(to_ref(c), to_ref(x), [](double k, double a) { return k != 0 ? a : 0.5; }));
  TESSERA_CHECK_CLOSE(clamp(x, -1, 1.5), ref::map(to_ref(x), [](double v) { return std::min(std::max(v, -1.0), 1.5); }));
  TESSERA_CHECK_CLOSE(lerp(x, y, 0.25), ref::map2(to_ref(x), to_ref(y), [](double a, double b) { return a + 0.25 * (b - a); }));
  const Tensor n = from_vector<float>({1, NAN, 3}, {3}).to(device());
  CHECK(isnan(n).to_vector<bool>() == std::vector<bool>{false, true, false});
  CHECK(std::isnan(clamp(n, 0, 2).to_vector<float>()[1]));
}

TEST_CASE("composite elementwise ops: activations with options, predicates, rounding division, masked_fill") {
  const Tensor x = from_vector<float>({-3, -0.5f, 0, 0.5f, 3, 30}, {6}).to(device());
  CHECK(leaky_relu(x, 0.1).to_vector<float>() == std::vector<float>{-0.3f, -0.05f, 0, 0.5f, 3, 30});
  TESSERA_CHECK_CLOSE(elu(x, 0.5), ref::map(to_ref(x), [](double v) { return v > 0 ? v : 0.5 * std::expm1(v); }), Tolerance{1e-6, 1e-7});
  // softplus with beta 2 and threshold 5: x itself where 2x > 5.
  TESSERA_CHECK_CLOSE(softplus(x, 2.0, 5.0),
                      ref::map(to_ref(x), [](double v) { return 2 * v > 5 ? v : std::log1p(std::exp(2 * v)) / 2; }), Tolerance{1e-6, 1e-7});
  TESSERA_CHECK_THROWS_WITH(softplus(x, 0.0), "softplus: beta must be nonzero");
  const Tensor s = from_vector<float>({1, NAN, INFINITY, -INFINITY, -2}, {5}).to(device());
  CHECK(isinf(s).to_vector<bool>() == std::vector<bool>{false, false, true, true, false});
  CHECK(isfinite(s).to_vector<bool>() == std::vector<bool>{true, false, false, false, true});
  CHECK(nan_to_num(s).to_vector<float>() == std::vector<float>{1, 0, std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(), -2});
  CHECK(nan_to_num(s, 7, 8, -9).to_vector<float>() == std::vector<float>{1, 7, 8, -9, -2});
  CHECK(nan_to_num(s.to(DType::f16)).to(DType::f32).to_vector<float>()[2] == 65504.0f);
  const Tensor i = from_vector<int32_t>({-7, -6, 0, 5, 7}, {5}).to(device());
  CHECK_FALSE(any(isinf(i)).item<bool>());
  CHECK(all(isfinite(i)).item<bool>());
  CHECK(logical_not(i).to_vector<bool>() == std::vector<bool>{false, false, true, false, false});
  CHECK(logical_not(gt(i, 0)).to_vector<bool>() == std::vector<bool>{true, true, true, false, false});
  // Rounding division, integers and floats, every sign combination.
  CHECK(div(i, full({}, 2, DType::i32, device()), "floor").to_vector<int32_t>() == std::vector<int32_t>{-4, -3, 0, 2, 3});
  CHECK(div(i, full({}, 2, DType::i32, device()), "trunc").to_vector<int32_t>() == std::vector<int32_t>{-3, -3, 0, 2, 3});
  CHECK(div(i, full({}, -2, DType::i32, device()), "trunc").to_vector<int32_t>() == std::vector<int32_t>{3, 3, 0, -2, -3});
  CHECK(remainder(i, -4).to_vector<int32_t>() == std::vector<int32_t>{-3, -2, 0, -3, -1});
  CHECK(tessera::fmod(i, -4).to_vector<int32_t>() == std::vector<int32_t>{-3, -2, 0, 1, 3});
  CHECK(floor_divide(i, 0).to_vector<int32_t>() == std::vector<int32_t>{0, 0, 0, 0, 0});  // defined, not a crash
  const Tensor f = from_vector<float>({-7.5f, 7.5f}, {2}).to(device());
  CHECK(div(f, full({}, 2.0, DType::f32, device()), "trunc").to_vector<float>() == std::vector<float>{-3, 3});
  CHECK(div(f, full({}, 2.0, DType::f32, device()), "floor").to_vector<float>() == std::vector<float>{-4, 3});
  // A zero quotient keeps its sign, as floor(a / b), Python and PyTorch give it: 0 / -3 and
  // -0 / 3 are -0.0, 0 / 3 and -0 / -3 are +0.0 (and 1 / 3 floors to +0.0).
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor num = from_doubles({0.0, -0.0, 0.0, -0.0, 1.0}, {5}, dt).to(device());
    const Tensor den = from_doubles({-3.0, 3.0, 3.0, -3.0, 3.0}, {5}, dt).to(device());
    for (const Tensor& q : {floor_divide(num, den), div(num, den, "floor")}) {
      const std::vector<double> got = q.to(DType::f64).to_vector<double>();
      const std::vector<bool> negative = {true, true, false, false, false};
      for (size_t e = 0; e < got.size(); ++e) {
        CAPTURE(e);
        CHECK(got[e] == 0.0);
        CHECK(std::signbit(got[e]) == negative[e]);
      }
    }
  }
  CHECK(div(f, full({}, 2.0, DType::f32, device()), "").to_vector<float>() == std::vector<float>{-3.75f, 3.75f});
  TESSERA_CHECK_THROWS_WITH(div(f, f, "round"), "div: rounding_mode must be");
  // masked_fill broadcasts the mask and keeps the input's dtype.
  const Tensor m = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).to(device());
  const Tensor mask = from_vector<bool>({true, false, true}, {3}).to(device());
  CHECK(masked_fill(m, mask, -1).to_vector<float>() == std::vector<float>{-1, 2, -1, -1, 5, -1});
  TESSERA_CHECK_THROWS_WITH(masked_fill(m, gt(m, 0).to(DType::f32), 0), "masked_fill: mask must be bool");
  TESSERA_CHECK_THROWS_WITH(masked_fill(mask, gt(m, 2), 0), "masked_fill: mask [2, 3] does not broadcast to input [3]");
}

TEST_CASE("cast converts between every pair of dtypes") {
  const std::vector<double> values = {0, 1, -1, 2.5, -2.5, 100, -100, 127, 200, 0.1};
  const std::vector<DType> all = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8,
                                  DType::u8,  DType::i32, DType::i64, DType::boolean};
  for (DType from : all) {
    for (DType to : all) {
      CAPTURE(dtype_name(from));
      CAPTURE(dtype_name(to));
      const Tensor src = from_doubles(values, {10}, from, device());
      const Tensor dst = src.to(to);
      CHECK(dst.dtype() == to);
      // Host oracle: the same conversion through the host reference path (double -> to).
      const ref::Ref src_vals = to_ref(src);
      std::vector<double> want(values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        const double v = src_vals.v[i];
        if (to == DType::boolean) want[i] = v != 0;
        else if (is_integer(to)) {
          const double lo = to == DType::i8 ? -128 : to == DType::u8 ? 0 : to == DType::i32 ? -2147483648.0 : -9.3e18;
          const double hi = to == DType::i8 ? 127 : to == DType::u8 ? 255 : to == DType::i32 ? 2147483647.0 : 9.3e18;
          // Integer -> integer wraps; float -> integer truncates and saturates.
          want[i] = is_floating(from) ? std::clamp(std::trunc(v), lo, hi) : v;
          if (!is_floating(from)) want[i] = round_to({{1}, {v}}, to).v[0];
        } else {
          want[i] = to_ref(from_vector(std::vector<double>{v}, {1}).to(to)).v[0];
        }
      }
      TESSERA_CHECK_CLOSE(dst, ref::Ref{{10}, want}, Tolerance{0, 0});
    }
  }
}

TEST_CASE("in-place ops and copy_ write only inside the destination view") {
  constexpr float kSentinel = -12345.0f;
  const Tensor buffer = full({10, 12}, kSentinel, DType::f32, device());
  Tensor view = buffer.slice(0, 2, 8, 2).slice(1, 3, 11);  // [3, 8], non-contiguous
  const Tensor src = make_input({3, 8}, DType::f32, 3, -1, 1, Layout::transposed);
  view.copy_(src);
  TESSERA_CHECK_CLOSE(view, to_ref(src));
  view.add_(src);
  view.mul_(0.5);
  view.sub_(make_input({8}, DType::f32, 4));  // broadcast source
  const Tensor row = make_input({8}, DType::f32, 4);
  TESSERA_CHECK_CLOSE(view, ref::map2(to_ref(src), to_ref(row), [](double s, double r) { return (s + s) * 0.5 - r; }));
  view.fill_(7.0);
  const ref::Ref all = to_ref(buffer);
  int64_t inside = 0, untouched = 0;
  for (int64_t i = 0; i < all.numel(); ++i) {
    const int64_t r = i / 12, c = i % 12;
    const bool in_view = r >= 2 && r < 8 && (r - 2) % 2 == 0 && c >= 3 && c < 11;
    if (in_view) inside += all.v[i] == 7.0;
    else untouched += all.v[i] == kSentinel;
  }
  CHECK(inside == 24);
  CHECK(untouched == 120 - 24);
}

TEST_CASE("copy_ handles overlapping source and destination") {
  Tensor x = arange(0.0, 6.0, 1.0, DType::f32, device()).reshape({2, 3});
  Tensor sq = arange(0.0, 9.0, 1.0, DType::f32, device()).reshape({3, 3});
  sq.copy_(sq.mT());  // in-place transpose: must read before writing
  CHECK(sq.to_vector<float>() == std::vector<float>{0, 3, 6, 1, 4, 7, 2, 5, 8});
  x.narrow(1, 1, 2).copy_(x.narrow(1, 0, 2));  // shifted overlap
  CHECK(x.to_vector<float>() == std::vector<float>{0, 0, 1, 3, 3, 4});
}
