// group_norm and instance_norm against a float64 host computation of their definition, their
// gradients by central differences, nn::GroupNorm / nn::InstanceNorm2d, and bad input.
#include <cmath>

#include "support/checks.h"
#include "support/gradcheck.h"
#include "tessera/nn/layers.h"

using namespace tessera;
using namespace tessera::test;

namespace {
using V = std::vector<Tensor>;
// y[n, c, s] = (x - mean) / sqrt(var + eps) * w[c] + b[c], statistics over group g = c / (C / G)
// of sample n (biased variance), x laid out [N, C, S].
std::vector<double> group_norm_ref(const std::vector<double>& x, int64_t n, int64_t c, int64_t s, int64_t groups, const std::vector<double>& w,
                                   const std::vector<double>& b, double eps) {
  std::vector<double> y(x.size());
  const int64_t per = c / groups;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      double sum = 0, sq = 0;
      const int64_t count = per * s;
      for (int64_t ch = g * per; ch < (g + 1) * per; ++ch)
        for (int64_t k = 0; k < s; ++k) sum += x[static_cast<size_t>((i * c + ch) * s + k)];
      const double mean = sum / static_cast<double>(count);
      for (int64_t ch = g * per; ch < (g + 1) * per; ++ch)
        for (int64_t k = 0; k < s; ++k) sq += std::pow(x[static_cast<size_t>((i * c + ch) * s + k)] - mean, 2);
      const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(count) + eps);
      for (int64_t ch = g * per; ch < (g + 1) * per; ++ch)
        for (int64_t k = 0; k < s; ++k) {
          const auto at = static_cast<size_t>((i * c + ch) * s + k);
          y[at] = (x[at] - mean) * rstd * (w.empty() ? 1.0 : w[static_cast<size_t>(ch)]) + (b.empty() ? 0.0 : b[static_cast<size_t>(ch)]);
        }
    }
  }
  return y;
}

void check_close(const Tensor& got, const std::vector<double>& want, double tol) {
  const std::vector<double> v = got.to(DType::f64).to_vector<double>();
  REQUIRE(v.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < v.size(); ++i) worst = std::max(worst, std::fabs(v[i] - want[i]));
  CHECK(worst <= tol);
}
}  // namespace

TEST_CASE("group_norm and instance_norm match their definition in float64, with and without affine") {
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dt));
    const Tensor x = make_input({3, 6, 4, 5}, dt, 70, -2, 3);
    const Tensor w = make_input({6}, dt, 71), b = make_input({6}, dt, 72);
    const std::vector<double> xv = x.to(DType::f64).to_vector<double>(), wv = w.to(DType::f64).to_vector<double>(),
                              bv = b.to(DType::f64).to_vector<double>();
    const double tol = dt == DType::f32 ? 2e-5 : 1e-12;
    for (int64_t groups : {1, 2, 3, 6}) {
      CAPTURE(groups);
      check_close(group_norm(x, groups, w, b, 1e-5), group_norm_ref(xv, 3, 6, 20, groups, wv, bv, 1e-5), tol);
      check_close(group_norm(x, groups), group_norm_ref(xv, 3, 6, 20, groups, {}, {}, 1e-5), tol);
    }
    check_close(instance_norm(x, w, b, 1e-3), group_norm_ref(xv, 3, 6, 20, 6, wv, bv, 1e-3), tol);
    // A 3-D input [N, C, L] and the modules.
    const Tensor x3 = make_input({2, 4, 7}, dt, 73);
    check_close(group_norm(x3, 2), group_norm_ref(x3.to(DType::f64).to_vector<double>(), 2, 4, 7, 2, {}, {}, 1e-5), tol);
    nn::GroupNorm gn(3, 6, 1e-5, true, {dt, device()});
    gn.weight = w, gn.bias = b;
    check_close(gn.forward(x), group_norm_ref(xv, 3, 6, 20, 3, wv, bv, 1e-5), tol);
    nn::InstanceNorm2d in(6, 1e-5, false, {dt, device()});
    check_close(in.forward(x), group_norm_ref(xv, 3, 6, 20, 6, {}, {}, 1e-5), tol);
    CHECK(in.parameters().empty());
  }
}

TEST_CASE("group_norm and instance_norm gradients match central differences") {
  TESSERA_CHECK_GRAD([](const V& in) { return group_norm(in[0], 2, in[1], in[2], 1e-5); },
                     {grad_input({2, 4, 3, 2}, 74), grad_input({4}, 75), grad_input({4}, 76)});
  TESSERA_CHECK_GRAD([](const V& in) { return instance_norm(in[0], in[1], in[2], 1e-5); },
                     {grad_input({2, 3, 5}, 77), grad_input({3}, 78), grad_input({3}, 79)});
  TESSERA_CHECK_GRAD([](const V& in) { return group_norm(in[0].mT(), 3); }, {grad_input({2, 3, 4, 3}, 80)});
}

TEST_CASE("group_norm and instance_norm refuse bad input naming the op and the shapes") {
  const Tensor x = zeros({2, 6, 3, 3}, DType::f32, device());
  TESSERA_CHECK_THROWS_WITH(group_norm(x, 4), "group_norm: 4 groups do not divide the 6 channels of [2, 6, 3, 3]");
  TESSERA_CHECK_THROWS_WITH(group_norm(x, 2, zeros({5}, DType::f32, device())), "group_norm: weight and bias must be [6] (one per channel), got [5]");
  TESSERA_CHECK_THROWS_WITH(group_norm(zeros({6}, DType::f32, device()), 2), "group_norm: input must be [N, C, ...], got [6]");
  TESSERA_CHECK_THROWS_WITH(instance_norm(zeros({2, 6}, DType::f32, device())), "instance_norm: input must be [N, C, spatial...], got [2, 6]");
  TESSERA_CHECK_THROWS_WITH(group_norm(zeros({2, 6, 3}, DType::i64, device()), 2), "group_norm: expected a floating dtype, got int64");
}
