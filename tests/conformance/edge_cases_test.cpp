// Reliability at the edges, on every backend: shape arithmetic that would overflow int64 is an
// error naming the op (never a small buffer that kernels overrun), and the autograd rules at
// edge points agree with PyTorch (clamp at its bounds, pow at 0^0, std of a constant, norm at
// zero, softmax with +inf, bool + bool).
#include <cmath>
#include <limits>

#include "support/checks.h"

using namespace tessera;
using namespace tessera::test;

namespace {
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

Tensor leaf(const std::vector<double>& v, DType dt = DType::f32) {
  return from_doubles(v, {static_cast<int64_t>(v.size())}, dt, device()).set_requires_grad();
}
std::vector<double> grad_of(const Tensor& t) { return t.grad().to_vector<double>(); }
}  // namespace

TEST_CASE("element and byte counts that overflow int64 are errors naming the op and shape") {
  TESSERA_CHECK_THROWS_WITH(empty({(int64_t{1} << 62) + 1, 4}, DType::f32, device()), "empty: shape [4611686018427387905, 4]");
  TESSERA_CHECK_THROWS_WITH(zeros({int64_t{1} << 61, 2}, DType::f32, device()), "more than 2^63 bytes");
  TESSERA_CHECK_THROWS_WITH(ones({kMax, kMax}, DType::u8, device()), "has more than 2^63 elements");
  TESSERA_CHECK_THROWS_WITH(empty({-1, 4}, DType::f32, device()), "empty: negative size in shape [-1, 4]");
  // A zero anywhere makes the count 0, however large the other sizes.
  CHECK(empty({0, kMax}, DType::f32, device()).numel() == 0);
  CHECK(empty({0, int64_t{1} << 40, int64_t{1} << 40}, DType::f32, device()).numel() == 0);  // strides saturate (fuzz_idx)
  const Tensor row = zeros({1, 4}, DType::f32, device());
  TESSERA_CHECK_THROWS_WITH(row.expand({kMax, 4}), "expand: shape [9223372036854775807, 4] has more than 2^63 elements");
  CHECK(row.expand({1 << 20, 4}).numel() == (int64_t{1} << 22));
}

TEST_CASE("view bounds checks cannot be bypassed by overflow") {
  const Tensor a = arange(0, 6, 1, DType::f32, device()).reshape({2, 3});
  TESSERA_CHECK_THROWS_WITH(a.narrow(1, kMax - 1, 3), "narrow: range [9223372036854775806, +3) out of bounds for axis 1 of size 3");
  TESSERA_CHECK_THROWS_WITH(a.narrow(1, 1, kMax), "out of bounds");
  TESSERA_CHECK_THROWS_WITH(a.narrow(1, -1, 2), "narrow: range [2, 4) out of bounds");
  // A huge step selects one element instead of wrapping the size computation.
  const Tensor s = a.slice(1, 0, 3, kMax);
  CHECK(s.shape() == Shape{2, 1});
  CHECK(s.to_vector<float>() == std::vector<float>{0, 3});
  CHECK(a.slice(1, 1, 3, kMax - 1).to_vector<float>() == std::vector<float>{1, 4});
}

TEST_CASE("clamp passes the whole gradient at exactly its bounds") {
  Tensor x = leaf({-2, -1, 0, 1, 2});
  clamp(x, -1.0, 1.0).backward(ones({5}, DType::f32, device()));
  CHECK(grad_of(x) == std::vector<double>{0, 1, 1, 1, 0});
  // Tensor bounds get the gradient only where they are the result (PyTorch's rule).
  Tensor y = leaf({-2, -1, 0, 1, 2}), lo = leaf({-1, -1, -1, -1, -1}), hi = leaf({1, 1, 1, 1, 1});
  clamp(y, lo, hi).backward(ones({5}, DType::f32, device()));
  CHECK(grad_of(y) == std::vector<double>{0, 1, 1, 1, 0});
  CHECK(grad_of(lo) == std::vector<double>{1, 0, 0, 0, 0});
  CHECK(grad_of(hi) == std::vector<double>{0, 0, 0, 0, 1});
}

TEST_CASE("pow at 0^0, std of a constant slice and norm at zero have gradient 0, not NaN") {
  Tensor base = leaf({0, 0, 2}), expo = leaf({0, 2, 0});
  pow(base, expo).backward(ones({3}, DType::f32, device()));
  CHECK(grad_of(base) == std::vector<double>{0, 0, 0});
  const auto ge = grad_of(expo);  // d/db a^b = a^b ln a; 0 at a == 0
  CHECK(ge[0] == 0);
  CHECK(ge[1] == 0);
  CHECK(ge[2] == doctest::Approx(std::log(2.0)).epsilon(1e-3));
  Tensor s = leaf({0, 0});
  sum(pow(s, 0.0)).backward();
  CHECK(grad_of(s) == std::vector<double>{0, 0});

  Tensor c = from_doubles({3, 3, 3, 1, 2, 3}, {2, 3}, DType::f32, device()).set_requires_grad();
  sum(tessera::std(c, {1})).backward();
  const auto gc = grad_of(c);
  for (int i = 0; i < 3; ++i) CHECK(gc[i] == 0);  // the constant row
  for (int i = 3; i < 6; ++i) CHECK(std::isfinite(gc[i]));
  CHECK(gc[3] == doctest::Approx(-0.5));           // d std / dx_0 for [1, 2, 3] (correction 1)

  for (double p : {2.0, 3.0}) {
    CAPTURE(p);
    Tensor z = leaf({0, 0, 0});
    norm(z, p).backward();
    CHECK(grad_of(z) == std::vector<double>{0, 0, 0});
    Tensor v = leaf({3, 0, -4});
    norm(v, p).backward();
    const auto gv = grad_of(v);
    const double n = std::pow(std::pow(3, p) + std::pow(4, p), 1 / p);
    CHECK(gv[0] == doctest::Approx(std::pow(3 / n, p - 1)).epsilon(1e-5));
    CHECK(gv[1] == 0);
    CHECK(gv[2] == doctest::Approx(-std::pow(4 / n, p - 1)).epsilon(1e-5));
  }
}

TEST_CASE("softmax and cross entropy of a row holding +inf are NaN across the row") {
  const double inf = INFINITY;
  const Tensor x = from_doubles({1, inf, 2, 1, 2, 3, -inf, -inf, -inf}, {3, 3}, DType::f32, device());
  for (const Tensor& y : {softmax(x, 1), log_softmax(x, 1)}) {
    const auto v = y.to_vector<double>();
    for (int i = 0; i < 3; ++i) CHECK(std::isnan(v[i]));      // the +inf row: all NaN (PyTorch)
    for (int i = 3; i < 6; ++i) CHECK(std::isfinite(v[i]));   // an ordinary row
  }
  const Tensor logits = from_doubles({1, inf, 2, 1, 2, 3}, {2, 3}, DType::f32, device());
  const Tensor target = from_doubles({0, 2}, {2}, DType::i64, device());
  const auto losses = cross_entropy(logits, target, Reduction::none).to_vector<double>();
  CHECK(std::isnan(losses[0]));
  CHECK(std::isfinite(losses[1]));
}

TEST_CASE("bool + bool is a logical or and bool * bool a logical and") {
  const Tensor a = from_vector<bool>({true, true, false, false}, {4}, device());
  const Tensor b = from_vector<bool>({true, false, true, false}, {4}, device());
  CHECK(add(a, b).dtype() == DType::boolean);
  CHECK(add(a, b).to_vector<bool>() == std::vector<bool>{true, true, true, false});
  CHECK(mul(a, b).to_vector<bool>() == std::vector<bool>{true, false, false, false});
  TESSERA_CHECK_THROWS_WITH(sub(a, b), "sub: not supported for dtype bool");
}

TEST_CASE("anomaly mode names the first op that makes a NaN or Inf") {
  Tensor x = leaf({-1, 1});
  {
    const AnomalyGuard anomaly;
    TESSERA_CHECK_THROWS_WITH(tessera::log(x), "anomaly: forward of 'log' produced a non-finite value");
    Tensor y = leaf({0, 1});
    const Tensor r = sqrt(y);  // finite forward, infinite derivative at 0
    TESSERA_CHECK_THROWS_WITH(sum(r).backward(), "anomaly: backward of 'sqrt' produced a non-finite gradient");
  }
  CHECK_FALSE(anomaly_detection());
  CHECK(std::isnan(tessera::log(x).to_vector<double>()[0]));  // off again: no check, no throw
}

TEST_CASE("an allocation failure is an OutOfMemory error and the device recovers") {
  empty_cache(device());
  const Tensor keep = ones({1000}, DType::f32, device());
  inject_allocation_failures(device(), 2);  // the first try and the retry after releasing the cache
  try {
    (void)zeros({37, 1 << 20}, DType::f32, device());
    FAIL("no OutOfMemory");
  } catch (const OutOfMemory& e) {
    CHECK(std::string(e.what()).find("is out of memory allocating 155189248 B (in use") != std::string::npos);
  }
  inject_allocation_failures(device(), 0);
  const Tensor t = full({37, 1 << 20}, 2.0, DType::f32, device());
  CHECK(sum(t).item<double>() == doctest::Approx(2.0 * 37 * (1 << 20)));
  CHECK(sum(keep).item<double>() == 1000);
}
