// Reductions, scans and softmax against the double reference, over axis sets, keepdim,
// layouts and sizes large enough to exercise the parallel paths; plus determinism.
#include <cmath>
#include <limits>

#include "support/checks.h"

using namespace tessera;
using namespace tessera::test;

namespace {
const std::vector<Axes> kAxesSets = {{}, {0}, {1}, {-1}, {0, 2}, {1, 2}, {0, 1, 2}};
double add_fold(double a, double b) { return a + b; }
double mul_fold(double a, double b) { return a * b; }
double max_fold(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double min_fold(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }

// Sums accumulate many rounded terms: allow error relative to the sum of magnitudes.
Tolerance sum_tol(DType dt, int64_t terms) {
  Tolerance t = tolerance_for(dt);
  t.atol = std::max(t.atol, t.rtol * 4.0 * static_cast<double>(std::max<int64_t>(terms, 1)));
  return t;
}
}  // namespace

TEST_CASE("sum, prod, amax, amin, mean over axis sets with keepdim and layouts") {
  uint64_t seed = 10;
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32}) {
    for (Layout layout : kLayouts) {
      for (const Axes& axes : kAxesSets) {
        for (bool keepdim : {false, true}) {
          CAPTURE(dtype_name(dt));
          CAPTURE(layout_name(layout));
          CAPTURE(shape_str(axes));
          CAPTURE(keepdim);
          const Tensor x = make_input({3, 4, 5}, dt, ++seed, -2, 2, layout);
          const ref::Ref r = to_ref(x);
          const DType acc = is_floating(dt) ? dt : DType::i64;
          TESSERA_CHECK_CLOSE(sum(x, axes, keepdim), round_to(ref::reduce(r, axes, keepdim, 0.0, add_fold), acc), sum_tol(acc, 60));
          TESSERA_CHECK_CLOSE(prod(x, axes, keepdim), round_to(ref::reduce(r, axes, keepdim, 1.0, mul_fold), acc), sum_tol(acc, 60));
          TESSERA_CHECK_CLOSE(amax(x, axes, keepdim), ref::reduce(r, axes, keepdim, -INFINITY, max_fold));
          TESSERA_CHECK_CLOSE(amin(x, axes, keepdim), ref::reduce(r, axes, keepdim, INFINITY, min_fold));
          if (is_floating(dt)) {
            const int64_t count = axes.empty() ? 60 : [&] { int64_t n = 1; for (auto a : axes) n *= x.size(a); return n; }();
            const ref::Ref m = ref::map(ref::reduce(r, axes, keepdim, 0.0, add_fold), [&](double s) { return s / count; });
            TESSERA_CHECK_CLOSE(mean(x, axes, keepdim), round_to(m, dt), sum_tol(dt, 4));
          }
        }
      }
    }
  }
}

TEST_CASE("var, std, logsumexp, norm, any and all") {
  uint64_t seed = 50;
  for (DType dt : kFloatTypes) {
    for (const Axes& axes : kAxesSets) {
      CAPTURE(dtype_name(dt));
      CAPTURE(shape_str(axes));
      const Tensor x = make_input({3, 4, 5}, dt, ++seed, -3, 3, Layout::strided);
      const ref::Ref r = to_ref(x);
      const ref::Ref s = ref::reduce(r, axes, false, 0.0, add_fold);
      const ref::Ref cnt = ref::reduce(ref::map(r, [](double) { return 1.0; }), axes, false, 0.0, add_fold);
      ref::Ref mean_r = s;
      for (int64_t i = 0; i < s.numel(); ++i) mean_r.v[i] = s.v[i] / cnt.v[i];
      // Reference variance via explicit deviations (two-pass).
      ref::Ref sq = ref::reduce(r, axes, true, 0.0, add_fold);
      const ref::Ref cntk = ref::reduce(ref::map(r, [](double) { return 1.0; }), axes, true, 0.0, add_fold);
      for (int64_t i = 0; i < sq.numel(); ++i) sq.v[i] /= cntk.v[i];
      const ref::Ref dev2 = ref::map2(r, sq, [](double v, double m) { return (v - m) * (v - m); });
      ref::Ref var1 = ref::reduce(dev2, axes, false, 0.0, add_fold);
      for (int64_t i = 0; i < var1.numel(); ++i) var1.v[i] /= (cnt.v[i] - 1);
      const Tolerance tol = sum_tol(dt, 8);
      TESSERA_CHECK_CLOSE(var(x, axes), round_to(var1, dt), tol);
      TESSERA_CHECK_CLOSE(tessera::std(x, axes), round_to(ref::map(var1, [](double v) { return std::sqrt(v); }), dt), tol);
      const ref::Ref lse = ref::map(ref::reduce(ref::map(r, [](double v) { return std::exp(v); }), axes, false, 0.0, add_fold),
                                    [](double v) { return std::log(v); });
      TESSERA_CHECK_CLOSE(logsumexp(x, axes), round_to(lse, dt), tol);
      TESSERA_CHECK_CLOSE(norm(x, 1.0, axes), round_to(ref::reduce(ref::map(r, [](double v) { return std::fabs(v); }), axes, false, 0.0, add_fold), dt), sum_tol(dt, 60));
      const ref::Ref l2 = ref::map(ref::reduce(ref::map(r, [](double v) { return v * v; }), axes, false, 0.0, add_fold),
                                   [](double v) { return std::sqrt(v); });
      TESSERA_CHECK_CLOSE(norm(x, 2.0, axes), round_to(l2, dt), sum_tol(dt, 60));
      TESSERA_CHECK_CLOSE(norm(x, INFINITY, axes), ref::reduce(ref::map(r, [](double v) { return std::fabs(v); }), axes, false, 0.0, max_fold));
      const Tensor pos = gt(x, 2.5);
      TESSERA_CHECK_CLOSE(any(pos, axes), ref::reduce(to_ref(pos), axes, false, 0.0, max_fold));
      TESSERA_CHECK_CLOSE(all(pos, axes), ref::reduce(to_ref(pos), axes, false, 1.0, min_fold));
    }
  }
}

TEST_CASE("argmax, argmin, cumsum, softmax and log_softmax along each axis") {
  uint64_t seed = 90;
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    for (Layout layout : kLayouts) {
      for (int64_t axis : {0, 1, 2, -1}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(layout_name(layout));
        CAPTURE(axis);
        const Tensor x = make_input({4, 5, 6}, dt, ++seed, -50, 50, layout);
        const ref::Ref r = to_ref(x);
        const int64_t a = axis < 0 ? axis + 3 : axis;
        TESSERA_CHECK_CLOSE(argmax(x, axis), ref::arg_reduce(r, a, true));
        TESSERA_CHECK_CLOSE(argmin(x, axis), ref::arg_reduce(r, a, false));
        TESSERA_CHECK_CLOSE(argmax(x, axis, true), [&] { auto w = ref::arg_reduce(r, a, true); w.shape.insert(w.shape.begin() + a, 1); return w; }());
        const DType acc = is_floating(dt) ? dt : DType::i64;
        TESSERA_CHECK_CLOSE(cumsum(x, axis), round_to(ref::cumsum(r, a), acc), sum_tol(acc, 200));
        if (is_floating(dt)) {
          const Tensor xs = div(x, 10.0);
          TESSERA_CHECK_CLOSE(softmax(xs, axis), round_to(ref::softmax(to_ref(xs), a, false), dt), sum_tol(dt, 2));
          TESSERA_CHECK_CLOSE(log_softmax(xs, axis), round_to(ref::softmax(to_ref(xs), a, true), dt), sum_tol(dt, 8));
        }
      }
    }
  }
  // Flattened argmax and ties (first index wins).
  const Tensor t = from_vector<float>({1, 5, 5, 2}, {2, 2}).to(device());
  CHECK(argmax(t).item<int64_t>() == 1);
  CHECK(argmin(t, 1).to_vector<int64_t>() == std::vector<int64_t>{0, 1});
}

TEST_CASE("softmax is stable for huge logits and NaN propagates through reductions") {
  const Tensor big = from_vector<float>({1000, 1001, -INFINITY, 999}, {4}).to(device());
  const auto s = softmax(big).to_vector<float>();
  CHECK(std::isfinite(s[0]));
  CHECK(s[2] == 0.0f);
  CHECK(s[0] + s[1] + s[3] == doctest::Approx(1.0f));
  const Tensor all_ninf = full({3}, -INFINITY, DType::f32, device());
  CHECK(logsumexp(all_ninf).item<float>() == -INFINITY);
  const Tensor n = from_vector<float>({1, NAN, 3}, {3}).to(device());
  CHECK(std::isnan(amax(n).item<float>()));
  CHECK(std::isnan(sum(n).item<float>()));
  CHECK(argmax(n).item<int64_t>() == 1);
  // Rows long enough for the vectorised CPU paths (several 8/16-lane blocks plus a tail): a NaN
  // in a block or in the tail makes amax/amin and that softmax row NaN; -inf/+inf stay exact.
  std::vector<float> rows(4 * 37);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>((i * 13) % 29) - 14.0f;
  rows[1 * 37 + 5] = NAN;                            // row 1: NaN inside a lane block
  rows[2 * 37 + 36] = NAN;                           // row 2: NaN in the tail
  rows[3 * 37 + 20] = INFINITY, rows[3 * 37 + 7] = -INFINITY;  // row 3: infinities
  const Tensor r = from_vector(rows, {4, 37}).to(device());
  const auto mx = amax(r, {1}).to_vector<float>(), mn = amin(r, {1}).to_vector<float>();
  CHECK(mx[0] == 14.0f);
  CHECK(mn[0] == -14.0f);
  CHECK((std::isnan(mx[1]) && std::isnan(mn[1]) && std::isnan(mx[2]) && std::isnan(mn[2])));
  CHECK((mx[3] == INFINITY && mn[3] == -INFINITY));
  const auto sm = softmax(r.narrow(0, 0, 3), 1).to_vector<float>();
  CHECK((std::isnan(sm[37 + 0]) && std::isnan(sm[2 * 37 + 0])));
  double row0 = 0;
  for (int j = 0; j < 37; ++j) row0 += sm[j];
  CHECK(row0 == doctest::Approx(1.0));
}

TEST_CASE("empty and size-1 reductions") {
  const Tensor e = zeros({0, 3}, DType::f32, device());
  CHECK(sum(e, {0}).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(prod(e, {0}).to_vector<float>() == std::vector<float>{1, 1, 1});
  CHECK(std::isnan(mean(e).item<float>()));
  CHECK(sum(e, {1}).shape() == Shape{0});
  CHECK(any(e).item<bool>() == false);
  CHECK(all(e).item<bool>() == true);
  TESSERA_CHECK_THROWS_WITH(amax(e, {0}), "max: cannot reduce over an empty axis");
  TESSERA_CHECK_THROWS_WITH(argmax(e), "argmax");
  const Tensor one = full({1, 1}, 3.5, DType::f32, device());
  CHECK(sum(one).item<float>() == 3.5f);
  CHECK(argmax(one, 0).to_vector<int64_t>() == std::vector<int64_t>{0});
  const Tensor s = scalar_tensor(2.0, DType::f32, device());
  CHECK(sum(s).item<float>() == 2.0f);
  CHECK(softmax(s).item<float>() == 1.0f);
  CHECK(cumsum(s, 0).item<float>() == 2.0f);
}

TEST_CASE("large reductions are accurate and independent of the thread count") {
  const int64_t n = 3'000'001;
  const Tensor x = make_input({n}, DType::f32, 4242, -1, 1);
  const ref::Ref r = to_ref(x);
  double want = 0;
  for (double v : r.v) want += v;
  const Tensor m = make_input({1000, 3001}, DType::f32, 4243, -1, 1);
  const int saved = num_threads();
  set_num_threads(1);
  const float s1 = sum(x).item<float>();
  const std::vector<float> cols1 = sum(m, {0}).to_vector<float>();
  const std::vector<float> rows1 = sum(m, {1}).to_vector<float>();
  set_num_threads(2);
  const float s2 = sum(x).item<float>();
  const std::vector<float> cols2 = sum(m, {0}).to_vector<float>();
  const std::vector<float> rows2 = sum(m, {1}).to_vector<float>();
  set_num_threads(0);
  (void)saved;
  CHECK(s1 == s2);  // bitwise
  CHECK(cols1 == cols2);
  CHECK(rows1 == rows2);
  CHECK(std::fabs(s1 - want) <= 1e-3);
  TESSERA_CHECK_CLOSE(sum(m, {0}), ref::reduce(to_ref(m), {0}, false, 0.0, add_fold), Tolerance{1e-5, 1e-4});
}

TEST_CASE("long rows: cumsum across many tiles, arg-extremes with ties and NaN in late lanes") {
  const int64_t len = 1000;
  std::vector<float> v(2 * len);
  for (int64_t j = 0; j < 2 * len; ++j) v[j] = static_cast<float>((j * 37) % 11) - 5.0f;
  v[700] = 9.0f, v[950] = 9.0f;           // row 0: first maximum at 700
  v[len + 999] = NAN, v[len + 998] = -9;  // row 1: the NaN wins argmax and argmin
  const Tensor x = from_vector(v, {2, len}).to(device());
  CHECK(argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{700, 999});
  CHECK(argmin(x, 1).to_vector<int64_t>() == std::vector<int64_t>{argmin(x.to(kCPU), 1).to_vector<int64_t>()[0], 999});
  const std::vector<float> c = cumsum(x, 1).to_vector<float>();
  double run = 0;
  for (int64_t j = 0; j < len; ++j) {
    run += v[j];
    CHECK(c[j] == doctest::Approx(run).epsilon(1e-6));
  }
}
