// Mixed precision: the autocast policy table op by op, gradients through autocast reaching f32
// master weights, 16-bit parameters updated through f32 master copies, and the GradScaler's
// back-off / skip / recovery under forced f16 overflow, with its state saved in checkpoints.
#include <cmath>
#include <filesystem>

#include "support/checks.h"
#include "tessera/autocast.h"
#include "tessera/nn/amp.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/trainer.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;

TEST_CASE("autocast: matmul, linear and conv2d run in the low dtype, reductions, softmax, norms and losses in f32") {
  for (DType low : {DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(low));
    const Tensor a = make_input({8, 16}, DType::f32, 1), b = make_input({16, 4}, DType::f32, 2);
    const Tensor img = make_input({2, 3, 6, 6}, DType::f32, 3), k = make_input({5, 3, 3, 3}, DType::f32, 4);
    const Tensor d = make_input({4, 4}, DType::f64, 5);
    const AutocastGuard guard(low);
    CHECK(matmul(a, b).dtype() == low);
    CHECK(linear(a, b.mT(), Tensor(), Activation::relu).dtype() == low);
    CHECK(conv2d(img, k).dtype() == low);
    const Tensor h = matmul(a, b);
    CHECK(softmax(h, 1).dtype() == DType::f32);
    CHECK(log_softmax(h, 1).dtype() == DType::f32);
    CHECK(sum(h).dtype() == DType::f32);
    CHECK(mean(h, {1}).dtype() == DType::f32);
    CHECK(layer_norm(h, 1).dtype() == DType::f32);
    CHECK(cross_entropy(h, from_vector(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}, {8}).to(device())).dtype() == DType::f32);
    CHECK(mse_loss(h, zeros_like(h)).dtype() == DType::f32);
    CHECK(relu(h).dtype() == low);             // other ops keep their input dtype
    CHECK(matmul(d, d).dtype() == DType::f64); // f64 is never cast
    {
      const AutocastGuard off(low, false);
      CHECK(matmul(a, b).dtype() == DType::f32);
    }
    CHECK(matmul(a, b).dtype() == low);  // restored after the inner scope
  }
  CHECK_FALSE(autocast_state().enabled);
  CHECK_THROWS_WITH_AS(AutocastGuard(DType::i32), doctest::Contains("autocast dtype must be bfloat16 or float16"), Error);
}

TEST_CASE("autocast turns off for a scope: AutocastGuard(f32, false) as the docs show, and AutocastGuard::disabled()") {
  const Tensor a = make_input({4, 4}, DType::f32, 1), b = make_input({4, 4}, DType::f32, 2);
  const AutocastGuard on(DType::bf16);
  CHECK(matmul(a, b).dtype() == DType::bf16);
  {
    const AutocastGuard off(DType::f32, false);
    CHECK(matmul(a, b).dtype() == DType::f32);
  }
  {
    const auto off = AutocastGuard::disabled();
    CHECK(matmul(a, b).dtype() == DType::f32);
  }
  CHECK(matmul(a, b).dtype() == DType::bf16);  // restored
  TESSERA_CHECK_THROWS_WITH(AutocastGuard(DType::f32, true), "autocast: the autocast dtype must be bfloat16 or float16, got float32");
}

TEST_CASE("autocast: gradients reach f32 leaves in f32 and match the f32 gradients within 16-bit tolerance") {
  for (DType low : {DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(low));
    const Tensor x = make_input({16, 32}, DType::f32, 10, -1, 1);
    const Tensor target = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7}, {16}).to(device());
    auto run = [&](bool amp) {
      Tensor w = make_input({8, 32}, DType::f32, 11, -0.5, 0.5).set_requires_grad();
      Tensor b = make_input({8}, DType::f32, 12, -0.5, 0.5).set_requires_grad();
      Tensor loss;
      {
        const AutocastGuard guard(low, amp);
        loss = cross_entropy(linear(x, w, b), target);
      }
      CHECK(loss.dtype() == DType::f32);
      loss.backward();
      CHECK(w.grad().dtype() == DType::f32);
      CHECK(b.grad().dtype() == DType::f32);
      return std::pair{w.grad(), b.grad()};
    };
    const auto [gw32, gb32] = run(false);
    const auto [gw, gb] = run(true);
    Tolerance tol = tolerance_for(low);
    tol.atol = std::max(tol.atol, 2e-3);
    TESSERA_CHECK_CLOSE(gw, to_ref(gw32), tol);
    TESSERA_CHECK_CLOSE(gb, to_ref(gb32), tol);
  }
}

TEST_CASE("bf16 parameters are updated through f32 master weights: steps too small for bf16 still accumulate") {
  // 1.0 in bf16 has a spacing of 2^-7; 100 SGD steps of 1e-4 move the master weight by 0.01 even
  // though each one alone rounds away, and the bf16 parameter follows the master weight.
  Tensor p = ones({4}, DType::bf16, device()).set_requires_grad();
  OptimOptions o;
  o.lr = 1e-4;
  SGD opt({p}, o);
  for (int i = 0; i < 100; ++i) {
    p.set_grad(ones({4}, DType::bf16, device()));
    opt.step();
  }
  CHECK(p.dtype() == DType::bf16);
  const auto state = opt.state_dict();
  REQUIRE(state.count("state.0.0.master") == 1);
  const Tensor master = state.at("state.0.0.master");
  CHECK(master.dtype() == DType::f32);
  CHECK(master.to_vector<double>()[0] == doctest::Approx(0.99).epsilon(1e-4));
  CHECK(p.to_vector<double>()[0] == doctest::Approx(static_cast<float>(BFloat16(0.99f))));
}

namespace {
// One scaler-driven step on loss = sum((x @ w)^2) under f16 autocast.
struct ScaledStep {
  Tensor w;
  Tensor x;
  std::unique_ptr<SGD> opt;
  explicit ScaledStep(double x_value) {
    w = full({4, 4}, 0.5, DType::f32, device()).set_requires_grad();
    x = full({4, 4}, x_value, DType::f32, device());
    OptimOptions o;
    o.lr = 0;  // the weights, and so the gradients, stay fixed: each step overflows or not by the scale alone
    opt = std::make_unique<SGD>(std::vector<Tensor>{w}, o);
  }
  bool run(GradScaler& scaler) {
    opt->zero_grad();
    Tensor loss;
    {
      const AutocastGuard guard(DType::f16);
      loss = sum(square(matmul(x, w)));
    }
    scaler.scale(loss).backward();
    const bool stepped = scaler.step(*opt);
    scaler.update();
    return stepped;
  }
};
}  // namespace

TEST_CASE("GradScaler: a forced f16 overflow skips the step and backs off, clean steps grow the scale again") {
  // d loss / d (x @ w) = 2 (x @ w) = 4 per element; times a scale of 2^20 that is 4 * 2^20 > 65504,
  // the f16 maximum: the f16 gradient of the matmul overflows to Inf.
  GradScalerOptions so;
  so.init_scale = 1 << 20;
  so.growth_interval = 3;
  GradScaler scaler(so);
  ScaledStep s(0.5);
  CHECK_FALSE(s.run(scaler));
  CHECK(scaler.skipped_steps() == 1);
  CHECK(scaler.get_scale() == doctest::Approx(1 << 19));
  CHECK(s.opt->steps() == 0);  // a skipped step never reaches the optimizer
  int skipped = 1;
  while (!s.run(scaler)) ++skipped;
  // Overflow while 4 * scale > 65504: scales 2^20 .. 2^14 skip (7 steps), 2^13 is the first that fits.
  CHECK(skipped == 7);
  CHECK(scaler.get_scale() == doctest::Approx(1 << 13));
  CHECK(s.opt->steps() == 1);
  s.run(scaler);
  s.run(scaler);  // three clean steps in a row: the scale doubles
  CHECK(scaler.get_scale() == doctest::Approx(1 << 14));
  CHECK_FALSE(s.run(scaler));  // 2^14 overflows again and backs off: the scale tracks the limit
  CHECK(scaler.get_scale() == doctest::Approx(1 << 13));

  // The unscaled gradients equal the f32 gradients (powers of two scale exactly).
  GradScaler exact(GradScalerOptions{.init_scale = 1024});
  ScaledStep t(0.5);
  t.opt->zero_grad();
  {
    const AutocastGuard guard(DType::f16);
    exact.scale(sum(square(matmul(t.x, t.w)))).backward();
  }
  exact.unscale_(*t.opt);
  exact.unscale_(*t.opt);  // idempotent within a step
  CHECK_FALSE(exact.found_inf());
  CHECK(t.w.grad().to_vector<double>() == std::vector<double>(16, 4.0));  // 2 (x @ w)_ij * x = 2 * 1 * 0.5 * 4 rows
}

TEST_CASE("GradScaler: state round-trips, bad options are refused") {
  GradScaler a(GradScalerOptions{.init_scale = 256, .growth_interval = 5});
  GradScaler b;
  b.load_state_dict(a.state_dict());
  CHECK(b.get_scale() == 256);
  CHECK_THROWS_WITH_AS(GradScaler(GradScalerOptions{.init_scale = -1}), doctest::Contains("init_scale"), Error);
  CHECK_THROWS_WITH_AS(GradScaler(GradScalerOptions{.backoff_factor = 1.5}), doctest::Contains("backoff_factor"), Error);
  CHECK_THROWS_WITH_AS(parse_precision("f8"), doctest::Contains("unknown precision 'f8'"), Error);
  CHECK(parse_precision("bfloat16") == DType::bf16);
}
