// Ops a PyTorch user reaches for that compose from others: max/min along an axis with
// indices, and cross entropy with class weights or probability targets (PyTorch's formulas,
// label smoothing included) -- values against float64 host computations, gradients by
// finite differences, on every backend.
#include <cmath>

#include "support/checks.h"
#include "support/gradcheck.h"

using namespace tessera;
using namespace tessera::test;

namespace {
using V = std::vector<Tensor>;

// Row-wise log_softmax of a host matrix [n, c].
std::vector<double> host_log_softmax(const std::vector<double>& x, int64_t n, int64_t c) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, x[i * c + j]);
    for (int64_t j = 0; j < c; ++j) s += std::exp(x[i * c + j] - m);
    for (int64_t j = 0; j < c; ++j) out[i * c + j] = x[i * c + j] - m - std::log(s);
  }
  return out;
}
}  // namespace

TEST_CASE("max and min along an axis give values and first indices, the gradient goes to the index") {
  const Tensor x = from_vector<float>({3, 1, 3, -2, 5, 5, 0, 0, -1}, {3, 3}).to(device());
  const ValuesIndices mx = tessera::max(x, 1);
  CHECK(mx.values.to_vector<float>() == std::vector<float>{3, 5, 0});
  CHECK(mx.indices.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0});  // first of ties
  CHECK(mx.indices.dtype() == DType::i64);
  const ValuesIndices mn = tessera::min(x, 0, true);
  CHECK(mn.values.shape() == Shape{1, 3});
  CHECK(mn.values.to_vector<float>() == std::vector<float>{-2, 0, -1});
  CHECK(mn.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 2});
  CHECK(tessera::max(x, -1).values.to_vector<float>() == amax(x, {1}).to_vector<float>());
  // Ties: amax splits the gradient, max(dim) gives it all to the index (PyTorch's behaviour).
  Tensor leaf = x.detach();
  leaf.set_requires_grad(true);
  sum(tessera::max(leaf, 1).values).backward();
  CHECK(leaf.grad().to_vector<float>() == std::vector<float>{1, 0, 0, 0, 1, 0, 1, 0, 0});
  TESSERA_CHECK_GRAD([](const V& in) { return tessera::max(in[0], 1).values; }, {grad_input({4, 5}, 3)});
  TESSERA_CHECK_GRAD([](const V& in) { return tessera::min(in[0].mT(), 0, true).values; }, {grad_input({4, 5}, 4)});
  TESSERA_CHECK_THROWS_WITH(tessera::max(x, 2), "max: axis 2");
  const ValuesIndices scalar = tessera::max(full({}, 7.0, DType::f32, device()), 0);
  CHECK(scalar.values.item<float>() == 7);
  CHECK(scalar.indices.item<int64_t>() == 0);
}

TEST_CASE("cross_entropy with class weights, label smoothing and ignored targets matches PyTorch's formula") {
  const int64_t n = 5, c = 4;
  const Tensor logits = make_input({n, c}, DType::f64, 7, -2, 2).to(device());
  const std::vector<int64_t> y = {0, 3, -100, 2, 3};
  const std::vector<double> w = {0.5, 1.0, 2.0, 3.0};
  const Tensor target = from_vector(y, {n}).to(device());
  const Tensor weight = from_vector(w, {c}).to(device());
  const std::vector<double> lp = host_log_softmax(logits.to_vector<double>(), n, c);
  for (double eps : {0.0, 0.2}) {
    CAPTURE(eps);
    double total = 0, wsum = 0;
    std::vector<double> per(n, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      if (y[i] == -100) continue;
      double smooth = 0;
      for (int64_t j = 0; j < c; ++j) smooth -= w[j] * lp[i * c + j];
      per[i] = (1 - eps) * -w[y[i]] * lp[i * c + y[i]] + eps / c * smooth;
      total += per[i];
      wsum += w[y[i]];
    }
    CHECK(cross_entropy(logits, target, weight, Reduction::mean, eps).item<double>() == doctest::Approx(total / wsum).epsilon(1e-12));
    CHECK(cross_entropy(logits, target, weight, Reduction::sum, eps).item<double>() == doctest::Approx(total).epsilon(1e-12));
    const std::vector<double> got = cross_entropy(logits, target, weight, Reduction::none, eps).to_vector<double>();
    for (int64_t i = 0; i < n; ++i) CHECK(got[i] == doctest::Approx(per[i]).epsilon(1e-12));
  }
  // Unit weights are the unweighted loss (the fused kernel).
  const Tensor ones_w = ones({c}, DType::f64, device());
  CHECK(cross_entropy(logits, target, ones_w, Reduction::mean, 0.1).item<double>() ==
        doctest::Approx(cross_entropy(logits, target, Reduction::mean, 0.1).item<double>()).epsilon(1e-12));
  TESSERA_CHECK_GRAD([&](const V& in) { return cross_entropy(in[0], target, weight, Reduction::mean, 0.1); }, {grad_input({n, c}, 9)});
  TESSERA_CHECK_THROWS_WITH(cross_entropy(logits, target, ones({3}, DType::f64, device())), "cross_entropy: weight must be [4] (one per class), got [3]");
}

TEST_CASE("cross_entropy with probability targets: one-hot targets equal class indices, soft targets match the formula") {
  const int64_t n = 6, c = 5;
  const Tensor logits = make_input({n, c}, DType::f64, 11, -3, 3).to(device());
  const Tensor y = from_vector<int64_t>({0, 4, 2, 2, 1, 3}, {n}).to(device());
  const Tensor hot = one_hot(y, c).to(DType::f64);
  for (double eps : {0.0, 0.1}) {
    CHECK(cross_entropy(logits, hot, Reduction::mean, eps).item<double>() ==
          doctest::Approx(cross_entropy(logits, y, Reduction::mean, eps).item<double>()).epsilon(1e-12));
  }
  const Tensor probs = softmax(make_input({n, c}, DType::f64, 12, -1, 1).to(device()), 1);
  const Tensor weight = from_vector<double>({1, 2, 0.5, 1, 3}, {c}).to(device());
  const std::vector<double> lp = host_log_softmax(logits.to_vector<double>(), n, c), t = probs.to_vector<double>(), w = weight.to_vector<double>();
  double want = 0;
  for (int64_t i = 0; i < n * c; ++i) want -= w[i % c] * t[i] * lp[i];
  CHECK(cross_entropy(logits, probs, weight).item<double>() == doctest::Approx(want / n).epsilon(1e-12));
  // [N, C, d] inputs: the class axis is 1.
  const Tensor x3 = make_input({2, c, 3}, DType::f64, 13, -2, 2).to(device());
  const Tensor p3 = softmax(make_input({2, c, 3}, DType::f64, 14, -1, 1).to(device()), 1);
  CHECK(cross_entropy(x3, p3, Reduction::none).shape() == Shape{2, 3});
  TESSERA_CHECK_GRAD([&](const V& in) { return cross_entropy(in[0], probs, weight, Reduction::mean, 0.05); }, {grad_input({n, c}, 15)});
  TESSERA_CHECK_THROWS_WITH(cross_entropy(logits, probs.narrow(1, 0, 3)), "cross_entropy: probability target [6, 3] must match input [6, 5]");
}

TEST_CASE("conv1d and padding \"same\" agree with explicit zero padding, forward and gradients") {
  // conv1d against a host loop: stride 2, padding 1, dilation 2, 2 groups.
  const Tensor x = make_input({2, 4, 9}, DType::f64, 21, -1, 1).to(device());
  const Tensor w = make_input({6, 2, 3}, DType::f64, 22, -1, 1).to(device());
  const Tensor b = make_input({6}, DType::f64, 23, -1, 1).to(device());
  const Tensor y = conv1d(x, w, b, 2, 1, 2, 2);
  const int64_t lo = (9 + 2 - 2 * 2 - 1) / 2 + 1;
  REQUIRE(y.shape() == Shape{2, 6, lo});
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>(), yv = y.to_vector<double>();
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t o = 0; o < 6; ++o) {
      for (int64_t l = 0; l < lo; ++l) {
        double acc = bv[o];
        const int64_t g = o / 3;
        for (int64_t ci = 0; ci < 2; ++ci) {
          for (int64_t k = 0; k < 3; ++k) {
            const int64_t pos = l * 2 - 1 + k * 2;
            if (pos >= 0 && pos < 9) acc += wv[(o * 2 + ci) * 3 + k] * xv[(n * 4 + g * 2 + ci) * 9 + pos];
          }
        }
        CHECK(yv[(n * 6 + o) * lo + l] == doctest::Approx(acc).epsilon(1e-12));
      }
    }
  }
  TESSERA_CHECK_GRAD([](const V& in) { return conv1d(in[0], in[1], Tensor(), 1, PaddingMode::same); },
                     {grad_input({1, 2, 7}, 24), grad_input({3, 2, 4}, 25)});
  // "same" with an even kernel: the extra zero row/column goes at the bottom/right (PyTorch).
  const Tensor img = make_input({1, 2, 5, 6}, DType::f64, 26, -1, 1).to(device());
  const Tensor k = make_input({3, 2, 2, 4}, DType::f64, 27, -1, 1).to(device());
  Tensor padded = zeros({1, 2, 5 + 1, 6 + 3}, DType::f64, device());  // totals 1 and 3: (0, 1) rows, (1, 2) columns
  padded.narrow(2, 0, 5).narrow(3, 1, 6).copy_(img);
  const Tensor same = conv2d(img, k, Tensor(), Size2{1, 1}, PaddingMode::same);
  CHECK(same.shape() == Shape{1, 3, 5, 6});
  TESSERA_CHECK_CLOSE(same, to_ref(conv2d(padded, k)), Tolerance{1e-12, 1e-12});
  CHECK(conv2d(img, k, Tensor(), Size2{1, 1}, PaddingMode::valid).shape() == Shape{1, 3, 4, 3});
  TESSERA_CHECK_THROWS_WITH(conv2d(img, k, Tensor(), Size2{2, 1}, PaddingMode::same), "conv2d: padding \"same\" needs stride 1");
  TESSERA_CHECK_THROWS_WITH(conv1d(img, k), "conv1d: expected input [N, C, L]");
}
