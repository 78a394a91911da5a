// nn kernels against naive references, and their gradients by finite differences.
#include "reference/nn_reference.h"
#include "support/checks.h"
#include "support/gradcheck.h"

using namespace tessera;
using namespace tessera::test;

namespace {
using V = std::vector<Tensor>;
Tolerance acc_tol(DType dt, int64_t terms) {
  Tolerance t = tolerance_for(dt);
  t.atol = std::max(t.atol, t.rtol * std::sqrt(static_cast<double>(terms)) * 2);
  return t;
}
}  // namespace

TEST_CASE("conv2d matches the reference over stride, padding, dilation and groups") {
  struct Case {
    Shape x, w;
    Size2 stride, padding, dilation;
    int64_t groups;
    bool bias;
  };
  const Case cases[] = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
      {{1, 4, 9, 9}, {6, 2, 3, 2}, {2, 1}, {0, 1}, {1, 2}, 2, false},
      {{3, 2, 5, 5}, {5, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},   // pointwise
      {{2, 4, 6, 6}, {4, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 4, true},   // depthwise
      {{5, 1, 8, 8}, {3, 1, 5, 5}, {3, 3}, {2, 2}, {1, 1}, 1, false},
  };
  uint64_t seed = 1;
  for (DType dt : kFloatTypes) {  // f16/bf16: 16-bit operands, f32 accumulation, one rounding
    for (const Case& c : cases) {
      CAPTURE(dtype_name(dt));
      CAPTURE(shape_str(c.x));
      CAPTURE(shape_str(c.w));
      const Tensor x = make_input(c.x, dt, ++seed), w = make_input(c.w, dt, ++seed);
      const Tensor b = c.bias ? make_input({c.w[0]}, dt, ++seed) : Tensor();
      const Tensor y = conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
      const ref::Ref rb = c.bias ? to_ref(b) : ref::Ref{};
      TESSERA_CHECK_CLOSE(y, round_to(ref::conv2d(to_ref(x), to_ref(w), c.bias ? &rb : nullptr, c.stride, c.padding, c.dilation, c.groups), dt),
                          acc_tol(dt, c.w[1] * c.w[2] * c.w[3]));
    }
  }
  TESSERA_CHECK_THROWS_WITH(conv2d(zeros({1, 3, 5, 5}), zeros({2, 2, 3, 3})), "conv2d: weight [2, 2, 3, 3] expects 2 input channels");
  TESSERA_CHECK_THROWS_WITH(conv2d(zeros({1, 3, 2, 2}), zeros({2, 3, 3, 3})), "conv2d: input [1, 3, 2, 2] is smaller than the kernel");
}

TEST_CASE("f32 3x3 stride-1 convolutions (Winograd on the cpu) match f64, forward and gradients") {
  // At least 8 channels each side (the CPU's Winograd F(2x2, 3x3) threshold), odd output sizes
  // (partial 2x2 tiles), padding 0, 1 and 2, and more tiles than one block holds (280 tiles).
  struct Case {
    Shape x;
    int64_t o;
    Size2 padding;
    bool bias;
  };
  // The wide ones: tile rows longer than the AVX-512 gather's 14-tile chunks (31 and 32 tiles).
  const Case cases[] = {{{5, 8, 15, 13}, 9, {1, 1}, true}, {{2, 12, 9, 10}, 8, {0, 0}, false}, {{1, 8, 5, 6}, 16, {2, 1}, true},
                        {{1, 8, 6, 61}, 8, {1, 1}, false}, {{1, 9, 4, 62}, 8, {2, 2}, true}};
  uint64_t seed = 90;
  for (const Case& c : cases) {
    CAPTURE(shape_str(c.x));
    const Tensor x0 = make_input(c.x, DType::f32, ++seed, -1, 1), w0 = make_input({c.o, c.x[1], 3, 3}, DType::f32, ++seed, -1, 1);
    const Tensor b0 = c.bias ? make_input({c.o}, DType::f32, ++seed) : Tensor();
    const int64_t ho = c.x[2] + 2 * c.padding[0] - 2, wo = c.x[3] + 2 * c.padding[1] - 2;
    const Tensor gy0 = make_input({c.x[0], c.o, ho, wo}, DType::f32, ++seed, -1, 1);
    auto run = [&](DType compute) {
      Tensor x = x0.to(compute).detach().set_requires_grad(), w = w0.to(compute).detach().set_requires_grad();
      const Tensor y = conv2d(x, w, c.bias ? b0.to(compute) : Tensor(), {1, 1}, c.padding);
      sum(mul(y, gy0.to(compute))).backward();
      return std::tuple{y, x.grad(), w.grad()};
    };
    const auto [y, gx, gw] = run(DType::f32);
    const auto [y64, gx64, gw64] = run(DType::f64);
    TESSERA_CHECK_CLOSE(y, round_to(to_ref(y64), DType::f32), acc_tol(DType::f32, c.x[1] * 9));
    TESSERA_CHECK_CLOSE(gx, round_to(to_ref(gx64), DType::f32), acc_tol(DType::f32, c.o * 9));
    TESSERA_CHECK_CLOSE(gw, round_to(to_ref(gw64), DType::f32), acc_tol(DType::f32, c.x[0] * ho * wo));
    // Every gradient is bitwise the same for any thread count (the weight gradient sums tiles).
    const int saved = num_threads();
    for (int threads : {1, 3}) {
      set_num_threads(threads);
      const auto [yt, gxt, gwt] = run(DType::f32);
      CHECK(yt.to_vector<float>() == y.to_vector<float>());
      CHECK(gxt.to_vector<float>() == gx.to_vector<float>());
      CHECK(gwt.to_vector<float>() == gw.to_vector<float>());
    }
    set_num_threads(saved);
  }
}

TEST_CASE("f16 and bf16 conv2d gradients match the f64 gradients of the same inputs") {
  uint64_t seed = 70;
  for (DType dt : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dt));
    const Tensor x0 = make_input({3, 4, 7, 6}, dt, ++seed, -1, 1), w0 = make_input({6, 2, 3, 3}, dt, ++seed, -1, 1);
    const Tensor gy0 = make_input({3, 6, 4, 6}, dt, ++seed, -1, 1);
    auto grads = [&](DType compute) {
      Tensor x = x0.to(compute).detach().set_requires_grad(), w = w0.to(compute).detach().set_requires_grad();
      sum(mul(conv2d(x, w, Tensor(), {2, 1}, {1, 1}, {1, 1}, 2), gy0.to(compute))).backward();
      return std::pair{x.grad(), w.grad()};
    };
    const auto [gx, gw] = grads(dt);
    const auto [gx64, gw64] = grads(DType::f64);
    CHECK(gx.dtype() == dt);
    TESSERA_CHECK_CLOSE(gx, round_to(to_ref(gx64), dt), acc_tol(dt, 6 * 9));
    TESSERA_CHECK_CLOSE(gw, round_to(to_ref(gw64), dt), acc_tol(dt, 3 * 4 * 6));
  }
}

TEST_CASE("pooling matches the reference") {
  const Tensor x = make_input({2, 3, 7, 8}, DType::f32, 50);
  TESSERA_CHECK_CLOSE(max_pool2d(x, {2, 2}), ref::max_pool2d(to_ref(x), {2, 2}, {2, 2}, {0, 0}, {1, 1}));
  TESSERA_CHECK_CLOSE(max_pool2d(x, {3, 3}, Size2{2, 1}, {1, 1}, {1, 2}), ref::max_pool2d(to_ref(x), {3, 3}, {2, 1}, {1, 1}, {1, 2}));
  TESSERA_CHECK_CLOSE(avg_pool2d(x, {3, 2}, Size2{2, 2}, {1, 1}, true), ref::avg_pool2d(to_ref(x), {3, 2}, {2, 2}, {1, 1}, true));
  TESSERA_CHECK_CLOSE(avg_pool2d(x, {3, 3}, Size2{1, 1}, {1, 1}, false), ref::avg_pool2d(to_ref(x), {3, 3}, {1, 1}, {1, 1}, false));
  // 2x2 / stride 2 windows (the device backends read each window row as one pair): f32 and f16,
  // an odd-offset view (pairs misaligned: the general path), ties and NaN keep the first-max rules.
  for (DType dt : {DType::f32, DType::f16}) {
    const Tensor xs = make_input({2, 3, 6, 8}, dt, 51);
    TESSERA_CHECK_CLOSE(avg_pool2d(xs, {2, 2}), ref::avg_pool2d(to_ref(xs), {2, 2}, {2, 2}, {0, 0}, true), acc_tol(dt, 4));
    TESSERA_CHECK_CLOSE(max_pool2d(xs, {2, 2}), ref::max_pool2d(to_ref(xs), {2, 2}, {2, 2}, {0, 0}, {1, 1}));
    const Tensor shifted = make_input({2, 3, 6, 9}, dt, 52).narrow(3, 1, 8);
    TESSERA_CHECK_CLOSE(avg_pool2d(shifted, {2, 2}), ref::avg_pool2d(to_ref(shifted), {2, 2}, {2, 2}, {0, 0}, true), acc_tol(dt, 4));
    TESSERA_CHECK_CLOSE(max_pool2d(shifted, {2, 2}), ref::max_pool2d(to_ref(shifted), {2, 2}, {2, 2}, {0, 0}, {1, 1}));
  }
  const Tensor special = from_vector<float>({1, 5, 5, 0, NAN, 2, 3, 3, 4, 4, 7, 7, 4, 4, 7, 7}, {1, 1, 4, 4}).to(device());
  const auto [ys, is] = max_pool2d_with_indices(special, {2, 2});
  CHECK(is.to_vector<int64_t>() == std::vector<int64_t>{4, 2, 8, 10});  // NaN wins; first of equal maxima
  CHECK(std::isnan(ys.to_vector<float>()[0]));
  for (const int64_t wo : {40, 14, 5}) {
    // Rows wide enough for the vectorised 2x2 path (40 windows: whole blocks of 8; 14: the last
    // block overlaps; 5: too short for a block): NaN in each tap position and ties between taps,
    // against the scan-order rules computed here.
    CAPTURE(wo);
    const int64_t w = 2 * wo;
    std::vector<float> v(static_cast<size_t>(2 * w));
    for (int64_t j = 0; j < w; ++j) v[j] = static_cast<float>((j * 7) % 5), v[w + j] = static_cast<float>((j * 3) % 5);
    for (int64_t t = 0; t < 4; ++t) v[static_cast<size_t>((t / 2) * w + 2 * ((5 + 9 * t) % wo) + t % 2)] = NAN;
    const auto [yw, iw] = max_pool2d_with_indices(from_vector(v, {1, 1, 2, w}).to(device()), {2, 2});
    // Without a gradient to feed, max_pool2d skips the indices: the same values.
    const std::vector<float> plain = max_pool2d(from_vector(v, {1, 1, 2, w}).to(device()), {2, 2}).to_vector<float>();
    const std::vector<float> got = yw.to_vector<float>();
    const std::vector<int64_t> got_i = iw.to_vector<int64_t>();
    for (int64_t o = 0; o < wo; ++o) {
      const int64_t taps[4] = {2 * o, 2 * o + 1, w + 2 * o, w + 2 * o + 1};
      int64_t want = taps[0];
      for (int64_t t = 1; t < 4 && !std::isnan(v[want]); ++t) {
        if (std::isnan(v[taps[t]]) || v[taps[t]] > v[want]) want = taps[t];
      }
      CAPTURE(o);
      CHECK(got_i[o] == want);
      CHECK((std::isnan(got[o]) ? std::isnan(v[want]) : got[o] == v[want]));
      CHECK((std::isnan(plain[o]) ? std::isnan(v[want]) : plain[o] == v[want]));
    }
  }
  // The 2x2 backward writes every input element once (no scatter): odd heights and widths leave
  // a row and a column outside every window, which must get 0; each winner gets its gradient.
  for (DType dt : {DType::f32, DType::f16}) {
    CAPTURE(dtype_name(dt));
    Tensor xo = make_input({2, 3, 7, 9}, dt, 53).set_requires_grad();
    const auto [yo, io] = max_pool2d_with_indices(xo, {2, 2});
    const Tensor go = make_input(yo.shape(), dt, 54);
    backward({yo}, {go});
    std::vector<float> want(2 * 3 * 7 * 9, 0.0f);
    const std::vector<int64_t> win = io.to_vector<int64_t>();
    const std::vector<float> gv = go.to(DType::f32).to_vector<float>();
    for (size_t o = 0; o < win.size(); ++o) want[(o / (3 * 4)) * (7 * 9) + static_cast<size_t>(win[o])] += gv[o];
    CHECK(xo.grad().to(DType::f32).to_vector<float>() == want);
  }
  const auto [y, idx] = max_pool2d_with_indices(x, {2, 2});
  CHECK(idx.dtype() == DType::i64);
  TESSERA_CHECK_CLOSE(adaptive_avg_pool2d(x, {1, 1}), to_ref(mean(x, {2, 3}, true)));
  const Tensor ad = adaptive_avg_pool2d(x, {3, 3});  // uneven windows
  CHECK(ad.shape() == Shape{2, 3, 3, 3});
  CHECK(ad.select(2, 0).select(2, 0).to_vector<float>()[0] == doctest::Approx(mean(x.narrow(2, 0, 3).narrow(3, 0, 3).select(0, 0).select(0, 0)).item<float>()));
}

TEST_CASE("batch_norm, layer_norm and cross_entropy match the reference") {
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dt));
    const Tensor x = make_input({4, 3, 5, 2}, dt, 60, -2, 3);
    const Tensor g = make_input({3}, dt, 61), b = make_input({3}, dt, 62);
    const ref::Ref rg = to_ref(g), rb = to_ref(b);
    Tensor rm = zeros({3}, dt, device()), rv = ones({3}, dt, device());
    TESSERA_CHECK_CLOSE(batch_norm(x, rm, rv, g, b, true, 0.1, 1e-5), ref::batch_norm(to_ref(x), &rg, &rb, 1e-5), acc_tol(dt, 40));
    // Running statistics: 0.9 * old + 0.1 * batch (unbiased variance).
    const ref::Ref bm = ref::reduce(to_ref(x), {0, 2, 3}, false, 0.0, [](double a, double v) { return a + v; });
    CHECK(rm.to_vector<double>()[1] == doctest::Approx(0.1 * bm.v[1] / 40).epsilon(1e-5));
    CHECK(rv.to_vector<double>()[0] == doctest::Approx(0.9 + 0.1 * var(x.to(DType::f64), {0, 2, 3}, 1).to_vector<double>()[0]).epsilon(1e-5));
    const Tensor eval = batch_norm(x, rm, rv, g, b, false);
    CHECK(eval.shape() == x.shape());
    const Tensor lx = make_input({3, 4, 6}, dt, 63);
    const Tensor lg = make_input({4, 6}, dt, 64), lb = make_input({4, 6}, dt, 65);
    const ref::Ref rlg = to_ref(lg), rlb = to_ref(lb);
    TESSERA_CHECK_CLOSE(layer_norm(lx, 2, lg, lb), ref::layer_norm(to_ref(lx), 2, &rlg, &rlb, 1e-5), acc_tol(dt, 24));
    TESSERA_CHECK_CLOSE(layer_norm(lx, 1), ref::layer_norm(to_ref(lx), 1, nullptr, nullptr, 1e-5), acc_tol(dt, 6));
    const Tensor logits = make_input({6, 5}, dt, 66, -3, 3);
    const std::vector<int64_t> t = {0, 4, -100, 2, 2, 1};
    const Tensor target = from_vector(t, {6}).to(device());
    for (double eps : {0.0, 0.1}) {
      const ref::Ref want = ref::cross_entropy(to_ref(logits), t, eps, -100);
      TESSERA_CHECK_CLOSE(cross_entropy(logits, target, Reduction::none, eps), want, acc_tol(dt, 5));
      double total = 0;
      for (double v : want.v) total += v;
      CHECK(cross_entropy(logits, target, Reduction::mean, eps).item<double>() == doctest::Approx(total / 5).epsilon(1e-5));
      CHECK(cross_entropy(logits, target, Reduction::sum, eps).item<double>() == doctest::Approx(total).epsilon(1e-5));
    }
    CHECK(nll_loss(log_softmax(logits, 1), target).item<double>() ==
          doctest::Approx(cross_entropy(logits, target).item<double>()).epsilon(1e-5));
  }
  TESSERA_CHECK_THROWS_WITH(cross_entropy(zeros({2, 3}), from_vector<int64_t>({0, 3}, {2})),
                            "cross_entropy: target 3 at position 1 is out of range for 3 classes");
  TESSERA_CHECK_THROWS_WITH(cross_entropy(zeros({2, 3}), from_vector<int64_t>({0}, {1})), "cross_entropy: target [1] does not match input [2, 3]");
}

TEST_CASE("gradients of conv2d, pooling, normalisation and losses") {
  TESSERA_CHECK_GRAD([](const V& in) { return conv2d(in[0], in[1], in[2], {1, 1}, {1, 1}); },
                     {grad_input({2, 2, 4, 4}, 1), grad_input({3, 2, 3, 3}, 2), grad_input({3}, 3)});
  TESSERA_CHECK_GRAD([](const V& in) { return conv2d(in[0], in[1], Tensor(), {2, 1}, {0, 1}, {1, 2}, 2); },
                     {grad_input({1, 4, 5, 6}, 4), grad_input({2, 2, 2, 2}, 5)});
  TESSERA_CHECK_GRAD([](const V& in) { return conv2d(in[0], in[1]); }, {grad_input({3, 3, 2, 2}, 6), grad_input({2, 3, 1, 1}, 7)});
  TESSERA_CHECK_GRAD([](const V& in) { return max_pool2d(in[0], {2, 2}, Size2{1, 1}, {1, 1}); }, {grad_input({2, 2, 4, 3}, 8)});
  TESSERA_CHECK_GRAD([](const V& in) { return max_pool2d(in[0], {2, 2}); }, {grad_input({2, 2, 4, 6}, 11)});
  TESSERA_CHECK_GRAD([](const V& in) { return avg_pool2d(in[0], {2, 2}); }, {grad_input({2, 2, 4, 6}, 12)});
  TESSERA_CHECK_GRAD([](const V& in) { return avg_pool2d(in[0], {3, 2}, Size2{2, 1}, {1, 1}, false); }, {grad_input({1, 2, 5, 4}, 9)});
  TESSERA_CHECK_GRAD([](const V& in) { return adaptive_avg_pool2d(in[0], {2, 3}); }, {grad_input({1, 2, 5, 4}, 10)});
  TESSERA_CHECK_GRAD([](const V& in) { return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true); },
                     {grad_input({3, 2, 2, 2}, 11), grad_input({2}, 12), grad_input({2}, 13)}, 1e-6, 1e-5);
  TESSERA_CHECK_GRAD([](const V& in) { return batch_norm(in[0], Tensor(), Tensor(), Tensor(), Tensor(), true); },
                     {grad_input({5, 3}, 14)}, 1e-6, 1e-5);
  TESSERA_CHECK_GRAD([](const V& in) { return layer_norm(in[0].mT(), 1, in[1], in[2]); },
                     {grad_input({4, 3}, 15), grad_input({4}, 16), grad_input({4}, 17)}, 1e-6, 1e-5);
  const Tensor target = from_vector<int64_t>({1, 0, -100, 2}, {4}).to(device());
  TESSERA_CHECK_GRAD([&](const V& in) { return cross_entropy(in[0], target, Reduction::mean, 0.1); }, {grad_input({4, 3}, 18)});
  const Tensor target3 = from_vector<int64_t>({1, 0, 2, 2}, {2, 2}).to(device());
  TESSERA_CHECK_GRAD([&](const V& in) { return cross_entropy(in[0], target3, Reduction::sum); }, {grad_input({2, 3, 2}, 19)});
  TESSERA_CHECK_GRAD([&](const V& in) { return nll_loss(log_softmax(in[0], 1), target); }, {grad_input({4, 3}, 20)});
  TESSERA_CHECK_GRAD([](const V& in) { return mse_loss(in[0], in[1]); }, {grad_input({3, 2}, 21), grad_input({3, 2}, 22)});
  TESSERA_CHECK_GRAD([](const V& in) { return l1_loss(in[0], in[1], Reduction::sum); }, {grad_input({5}, 23), grad_input({5}, 24, 2, 3)});
  const Tensor bt = from_vector<double>({0, 1, 1, 0.5}, {4}).to(device());
  TESSERA_CHECK_GRAD([&](const V& in) { return binary_cross_entropy_with_logits(in[0], bt, Reduction::mean, in[1]); },
                     {grad_input({4}, 25, -3, 3), grad_input({4}, 26, 0.5, 2)});
  TESSERA_CHECK_GRAD([](const V& in) {
    Generator gen(3);  // the same mask for every evaluation
    return dropout(in[0], 0.4, true, &gen);
  }, {grad_input({6, 5}, 27)});
}

TEST_CASE("dropout keeps the expected fraction and scales survivors") {
  Generator gen(9);
  const Tensor x = ones({100000}, DType::f32, device());
  const Tensor y = dropout(x, 0.25, true, &gen);
  const double kept = mean(ne(y, 0).to(DType::f32)).item<double>();
  CHECK(kept == doctest::Approx(0.75).epsilon(0.01));
  CHECK(amax(y).item<float>() == doctest::Approx(1.0f / 0.75f));
  CHECK(dropout(x, 0.25, false).is_same(x));
  const double bce = binary_cross_entropy_with_logits(from_vector<float>({1000.0f}, {1}).to(device()),
                                                      zeros({1}, DType::f32, device())).item<double>();
  CHECK(bce == doctest::Approx(1000.0));  // stable for huge logits
}

TEST_CASE("layer_norm parameter gradients over many rows match a float64 host computation") {
  // 300 rows: the device kernels split the rows into chunks and add the chunks in a second pass.
  const int64_t rows = 300, d = 24;
  const Tensor x = make_input({rows, d}, DType::f32, 61), w = make_input({rows, d}, DType::f32, 62);
  Tensor gamma = make_input({d}, DType::f32, 63), beta = make_input({d}, DType::f32, 64);
  gamma.set_requires_grad(), beta.set_requires_grad();
  sum(mul(layer_norm(x, 1, gamma, beta), w)).backward();
  const std::vector<double> xs = x.to(DType::f64).to_vector<double>(), ws = w.to(DType::f64).to_vector<double>();
  std::vector<double> dgamma(d, 0.0), dbeta(d, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mu += xs[r * d + j] / d;
    for (int64_t j = 0; j < d; ++j) var += (xs[r * d + j] - mu) * (xs[r * d + j] - mu) / d;
    for (int64_t j = 0; j < d; ++j) {
      dgamma[j] += ws[r * d + j] * (xs[r * d + j] - mu) / std::sqrt(var + 1e-5);
      dbeta[j] += ws[r * d + j];
    }
  }
  const std::vector<float> got_g = gamma.grad().to_vector<float>(), got_b = beta.grad().to_vector<float>();
  for (int64_t j = 0; j < d; ++j) {
    CHECK(got_g[j] == doctest::Approx(dgamma[j]).epsilon(1e-4).scale(1.0));
    CHECK(got_b[j] == doctest::Approx(dbeta[j]).epsilon(1e-4).scale(1.0));
  }
}
