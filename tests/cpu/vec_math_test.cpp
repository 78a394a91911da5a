// Accuracy of the CPU's vectorised float math (backends/cpu/vec_math.h), measured through the
// real kernels (tessera::exp etc. on the CPU device, so the loop that runs is the vectorised
// one of the kernel set in use; CTest runs this binary under each set) against a double
// reference, over every 61st float of each function's interesting range plus special values.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace {
using namespace tessera;

// Every `step`-th float between lo and hi (both finite, lo < hi), plus both ends.
std::vector<float> sweep(float lo, float hi, uint32_t step) {
  std::vector<float> v;
  auto key = [](float f) {  // monotone map of floats to integers
    const int32_t b = std::bit_cast<int32_t>(f);
    return b < 0 ? -static_cast<int64_t>(b & 0x7fffffff) : static_cast<int64_t>(b);
  };
  auto from_key = [](int64_t k) { return k < 0 ? std::bit_cast<float>(static_cast<int32_t>(-k) | INT32_MIN) : std::bit_cast<float>(static_cast<int32_t>(k)); };
  for (int64_t k = key(lo); k <= key(hi); k += step) v.push_back(from_key(k));
  v.push_back(hi);
  return v;
}

// |got - want| in units of the float spacing at want (subnormal spacing below FLT_MIN).
double ulps(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : INFINITY;
  if (std::isinf(want) || std::fabs(want) > std::numeric_limits<float>::max()) {
    return (std::isinf(got) && (got > 0) == (want > 0)) ? 0 : INFINITY;
  }
  const double a = std::fabs(want);
  const double spacing = a < 1.1754943508222875e-38 ? std::ldexp(1.0, -149) : std::ldexp(1.0, std::ilogb(a) - 23);
  return std::fabs(static_cast<double>(got) - want) / spacing;
}

struct Worst {
  double ulp = 0, abs = 0;
  float at_ulp = 0;
};

Worst measure(const std::vector<float>& xs, const std::function<Tensor(const Tensor&)>& op, double (*ref)(double)) {
  const Tensor x = from_vector(xs, {static_cast<int64_t>(xs.size())});
  const std::vector<float> got = op(x).to_vector<float>();
  Worst w;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = ref(static_cast<double>(xs[i]));
    const double u = ulps(got[i], want);
    if (u > w.ulp) w.ulp = u, w.at_ulp = xs[i];
    if (std::isfinite(want)) w.abs = std::max(w.abs, std::fabs(static_cast<double>(got[i]) - want));
  }
  return w;
}

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }

const std::vector<float> kSpecials = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f, 1e-38f, 1.0f, -1.0f};

}  // namespace

TEST_CASE("vectorised exp is within 2 ulp of exp in double, overflow and subnormals included") {
  const Worst w = measure(sweep(-104.0f, 89.0f, 61), [](const Tensor& t) { return exp(t); }, [](double v) { return std::exp(v); });
  MESSAGE("exp: max ", w.ulp, " ulp at ", w.at_ulp);
  CHECK(w.ulp <= 2.0);  // measured 1.01
  const Worst s = measure(kSpecials, [](const Tensor& t) { return exp(t); }, [](double v) { return std::exp(v); });
  CHECK(s.ulp <= 1.0);
}

TEST_CASE("vectorised log is within 2 ulp of log in double, subnormals and specials included") {
  const Worst w = measure(sweep(1e-45f, 3.4e38f, 61), [](const Tensor& t) { return log(t); }, [](double v) { return std::log(v); });
  MESSAGE("log: max ", w.ulp, " ulp at ", w.at_ulp);
  CHECK(w.ulp <= 2.0);  // measured 0.79
  const std::vector<float> specials = {0.0f, -0.0f, INFINITY, -1.0f, -INFINITY, NAN, 1.0f};
  const std::vector<float> got = log(from_vector(specials, {7})).to_vector<float>();
  CHECK(got[0] == -INFINITY);
  CHECK(got[1] == -INFINITY);
  CHECK(got[2] == INFINITY);
  CHECK(std::isnan(got[3]));
  CHECK(std::isnan(got[4]));
  CHECK(std::isnan(got[5]));
  CHECK(got[6] == 0.0f);
}

TEST_CASE("vectorised tanh is within 2 ulp, sigmoid and silu within 3 ulp of double") {
  const auto xs = sweep(-20.0f, 20.0f, 61);
  const Worst t = measure(xs, [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); });
  MESSAGE("tanh: max ", t.ulp, " ulp at ", t.at_ulp);
  CHECK(t.ulp <= 2.0);  // measured 1.30
  const Worst s = measure(sweep(-87.0f, 40.0f, 61), [](const Tensor& x) { return sigmoid(x); }, sigmoid_ref);
  MESSAGE("sigmoid: max ", s.ulp, " ulp at ", s.at_ulp);
  CHECK(s.ulp <= 3.0);  // measured 2.35: exp's ulp, then an add and a divide
  const Worst si = measure(sweep(-80.0f, 80.0f, 61), [](const Tensor& x) { return silu(x); }, silu_ref);
  MESSAGE("silu: max ", si.ulp, " ulp at ", si.at_ulp);
  CHECK(si.ulp <= 3.0);  // measured 2.22
  const Worst sp = measure(kSpecials, [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); });
  CHECK(sp.ulp <= 2.0);
}

TEST_CASE("vectorised erf is within 3 ulp and 2e-7 absolute, exact gelu within 1e-6 absolute") {
  const auto xs = sweep(-6.0f, 6.0f, 61);
  const Worst e = measure(xs, [](const Tensor& x) { return erf(x); }, [](double v) { return std::erf(v); });
  MESSAGE("erf: max ", e.ulp, " ulp at ", e.at_ulp, ", max abs ", e.abs);
  CHECK(e.abs <= 2e-7);  // measured 1.44e-7
  const Worst near0 = measure(sweep(-1.0f, 1.0f, 61), [](const Tensor& x) { return erf(x); }, [](double v) { return std::erf(v); });
  MESSAGE("erf on [-1, 1]: max ", near0.ulp, " ulp at ", near0.at_ulp);
  CHECK(near0.ulp <= 3.0);  // measured 2.44 (the alternating series' rounding in float)
  const Worst g = measure(sweep(-10.0f, 10.0f, 61), [](const Tensor& x) { return gelu(x); }, gelu_ref);
  MESSAGE("gelu: max abs ", g.abs);
  CHECK(g.abs <= 1e-6);  // measured 4.0e-7 (the exp-free rational erfc)
  const std::vector<float> nan_in = {NAN};
  CHECK(std::isnan(erf(from_vector(nan_in, {1})).to_vector<float>()[0]));
  CHECK(std::isnan(gelu(from_vector(nan_in, {1})).to_vector<float>()[0]));
}

TEST_CASE("softmax's exp of x - max is within 3 ulp down to 2^-126 and flushes below") {
  // Rows (0, x), x <= 0: softmax's second column is e^x / (1 + e^x), through vmath::exp_nonpos.
  const std::vector<float> xs = sweep(-87.3f, -1e-6f, 61);
  std::vector<float> rows;
  for (float x : xs) rows.push_back(0.0f), rows.push_back(x);
  const std::vector<float> got = softmax(from_vector(rows, {static_cast<int64_t>(xs.size()), 2}), 1).to_vector<float>();
  double worst = 0;
  float at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double e = std::exp(static_cast<double>(xs[i])), want = e / (1.0 + e);
    const double u = ulps(got[2 * i + 1], want);
    if (u > worst) worst = u, at = xs[i];
  }
  MESSAGE("softmax exp: max ", worst, " ulp at ", at);
  CHECK(worst <= 3.0);
  // Below 2^-126 the exp is flushed to 0 (not a subnormal); -inf gives 0, NaN stays NaN.
  const std::vector<float> special = {0.0f, -88.0f, 0.0f, -INFINITY, 0.0f, NAN};
  const std::vector<float> s = softmax(from_vector(special, {3, 2}), 1).to_vector<float>();
  CHECK(s[0] == 1.0f);
  CHECK(s[1] == 0.0f);
  CHECK(s[3] == 0.0f);
  CHECK(std::isnan(s[4]));
  CHECK(std::isnan(s[5]));
}

// The CPU kernels convert f16 with F16C (core/kernels/half.h); the integer conversions are the
// reference every other backend uses, so the two must agree bit for bit: all 65536 halves to
// float, and floats to half: a sweep of every exponent, each half, each midpoint between
// neighbouring halves (subnormals included) and the floats either side of it, overflow, NaNs.
TEST_CASE("f16 conversions in the CPU kernels give the integer reference's bits") {
  std::vector<uint16_t> all_bits(65536);
  for (uint32_t b = 0; b < 65536; ++b) all_bits[b] = static_cast<uint16_t>(b);
  std::vector<Half> halves(65536);
  for (uint32_t b = 0; b < 65536; ++b) halves[b] = Half::from_bits(all_bits[b]);
  const std::vector<float> widened = from_vector(halves, {65536}).to(DType::f32).to_vector<float>();
  int64_t bad_widen = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    bad_widen += std::bit_cast<uint32_t>(widened[b]) != std::bit_cast<uint32_t>(detail::half_bits_to_float_soft(all_bits[b]));
  }
  CHECK(bad_widen == 0);

  std::vector<float> xs = sweep(-3.4e38f, 3.4e38f, 16381);  // ~520K floats, every exponent
  for (uint32_t b = 0; b < 65536; ++b) {  // each half, and the midpoint to the next one with its neighbours
    if ((b & 0x7c00u) == 0x7c00u || (b & 0x7fffu) == 0x7bffu) continue;  // Inf/NaN, or no finite next half
    const float h = detail::half_bits_to_float_soft(all_bits[b]);
    const float next = detail::half_bits_to_float_soft(static_cast<uint16_t>(b + 1));
    const float mid = static_cast<float>((static_cast<double>(h) + next) / 2);  // exact: 12 significant bits
    xs.insert(xs.end(), {h, mid, std::nextafter(mid, INFINITY), std::nextafter(mid, -INFINITY)});
  }
  xs.push_back(65520.0f);  // rounds to Inf
  xs.push_back(std::nextafter(65520.0f, 0.0f));
  for (uint32_t nan : {0x7fc00001u, 0x7f800001u, 0xffbfe000u, 0x7fffffffu}) xs.push_back(std::bit_cast<float>(nan));
  const std::vector<Half> narrowed = from_vector(xs, {static_cast<int64_t>(xs.size())}).to(DType::f16).to_vector<Half>();
  int64_t bad_narrow = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const uint16_t want = detail::float_to_half_bits_soft(xs[i]);
    if (narrowed[i].bits != want && ++bad_narrow <= 5) MESSAGE("f16(", xs[i], "): got ", narrowed[i].bits, ", want ", want);
  }
  CHECK(bad_narrow == 0);
}
