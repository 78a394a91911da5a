// Optimizers against hand-written double-precision references of their update rules
// (PyTorch's formulas), schedules at chosen steps, clipping and optimizer state dicts.
#include <cmath>

#include "support/checks.h"
#include "tessera/nn/optim.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;

namespace {
// Runs `steps` updates of `opt` on p (starting at p0) with fixed gradients g_t = grads[t].
std::vector<double> run(Optimizer& opt, Tensor& p, const std::vector<std::vector<double>>& grads) {
  for (const auto& g : grads) {
    p.set_grad(from_vector(g, {static_cast<int64_t>(g.size())}).to(device()));
    opt.step();
  }
  return p.to_vector<double>();
}
Tensor param(const std::vector<double>& v) { return from_vector(v, {static_cast<int64_t>(v.size())}).to(device()).set_requires_grad(); }
const std::vector<double> kP0 = {1.0, -2.0, 0.5};
const std::vector<std::vector<double>> kGrads = {{0.1, -0.3, 0.2}, {0.05, 0.4, -0.1}, {-0.2, 0.1, 0.3}};
}  // namespace

TEST_CASE("SGD with momentum, dampening, Nesterov and weight decay matches the reference") {
  for (bool nesterov : {false, true}) {
    CAPTURE(nesterov);
    OptimOptions o;
    o.lr = 0.1, o.momentum = 0.9, o.weight_decay = 0.01, o.nesterov = nesterov, o.dampening = nesterov ? 0.0 : 0.1;
    Tensor p = param(kP0);
    SGD opt({p}, o);
    const auto got = run(opt, p, kGrads);
    std::vector<double> w = kP0, buf(3, 0.0);
    for (size_t t = 0; t < kGrads.size(); ++t) {
      for (int i = 0; i < 3; ++i) {
        double g = kGrads[t][i] + o.weight_decay * w[i];
        buf[i] = t == 0 ? g : o.momentum * buf[i] + (1 - o.dampening) * g;
        w[i] -= o.lr * (nesterov ? g + o.momentum * buf[i] : buf[i]);
      }
    }
    for (int i = 0; i < 3; ++i) CHECK(got[i] == doctest::Approx(w[i]).epsilon(1e-12));
  }
}

TEST_CASE("Adam and AdamW match the reference") {
  for (bool decoupled : {false, true}) {
    CAPTURE(decoupled);
    OptimOptions o;
    o.lr = 0.01, o.weight_decay = 0.1;
    Tensor p = param(kP0);
    Adam opt({p}, o, decoupled);
    const auto got = run(opt, p, kGrads);
    std::vector<double> w = kP0, m(3, 0), v(3, 0);
    for (size_t t = 1; t <= kGrads.size(); ++t) {
      for (int i = 0; i < 3; ++i) {
        double g = kGrads[t - 1][i];
        if (decoupled) w[i] *= 1 - o.lr * o.weight_decay;
        else g += o.weight_decay * w[i];
        m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
        v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
        const double mh = m[i] / (1 - std::pow(o.beta1, t)), vh = v[i] / (1 - std::pow(o.beta2, t));
        w[i] -= o.lr * mh / (std::sqrt(vh) + o.eps);
      }
    }
    for (int i = 0; i < 3; ++i) CHECK(got[i] == doctest::Approx(w[i]).epsilon(1e-9));
  }
}

TEST_CASE("RMSprop matches the reference") {
  OptimOptions o;
  o.lr = 0.01, o.momentum = 0.5;
  Tensor p = param(kP0);
  RMSprop opt({p}, o);
  const auto got = run(opt, p, kGrads);
  std::vector<double> w = kP0, sq(3, 0), buf(3, 0);
  for (const auto& g : kGrads) {
    for (int i = 0; i < 3; ++i) {
      sq[i] = o.alpha * sq[i] + (1 - o.alpha) * g[i] * g[i];
      buf[i] = o.momentum * buf[i] + g[i] / (std::sqrt(sq[i]) + o.eps);
      w[i] -= o.lr * buf[i];
    }
  }
  for (int i = 0; i < 3; ++i) CHECK(got[i] == doctest::Approx(w[i]).epsilon(1e-9));
}

TEST_CASE("parameter groups, missing gradients, state dicts") {
  Tensor a = param({1.0}), b = param({1.0}), c = param({1.0});
  OptimOptions slow, fast;
  slow.lr = 0.1;
  fast.lr = 1.0;
  SGD opt(std::vector<ParamGroup>{{{a}, slow}, {{b, c}, fast}});
  a.set_grad(ones({1}, DType::f64, device()));
  b.set_grad(ones({1}, DType::f64, device()));
  opt.step();  // c has no gradient: untouched
  CHECK(a.item<double>() == doctest::Approx(0.9));
  CHECK(b.item<double>() == doctest::Approx(0.0));
  CHECK(c.item<double>() == 1.0);
  Tensor p = param(kP0), q = param(kP0);
  Adam first({p}, OptimOptions{}), second({q}, OptimOptions{});
  run(first, p, {kGrads[0], kGrads[1]});
  run(second, q, {kGrads[0], kGrads[1]});
  Adam restored({q}, OptimOptions{});
  restored.load_state_dict(second.state_dict());
  CHECK(restored.steps() == 2);
  CHECK(run(first, p, {kGrads[2]}) == run(restored, q, {kGrads[2]}));
  TESSERA_CHECK_THROWS_WITH(make_optimizer("lion", {p}, {}), "optimizer: unknown optimizer 'lion'");
}

TEST_CASE("learning-rate schedules and the scheduler") {
  CHECK(StepLR(10, 0.5).factor(25) == doctest::Approx(0.25));
  CHECK(MultiStepLR({3, 7}, 0.1).factor(7) == doctest::Approx(0.01));
  CHECK(CosineLR(100).factor(0) == doctest::Approx(1.0));
  CHECK(CosineLR(100).factor(50) == doctest::Approx(0.5));
  CHECK(CosineLR(100, 0.1).factor(100) == doctest::Approx(0.1));
  OneCycleLR one(100, 0.3, 25, 1e4);
  CHECK(one.factor(0) == doctest::Approx(1.0 / 25));
  CHECK(one.factor(30) == doctest::Approx(1.0));
  CHECK(one.factor(100) == doctest::Approx(1.0 / 25e4));
  CHECK(LinearWarmup(10, 0.0).factor(5) == doctest::Approx(0.5));
  ChainedLR chained({std::make_shared<LinearWarmup>(10), std::make_shared<StepLR>(20, 0.1)});
  CHECK(chained.factor(5) == doctest::Approx(0.5));
  CHECK(chained.factor(25) == doctest::Approx(0.1));
  Tensor p = param({0.0});
  OptimOptions o;
  o.lr = 2.0;
  SGD opt({p}, o);
  Scheduler s(opt, std::make_shared<StepLR>(2, 0.5));
  s.step();
  s.step();
  CHECK(s.lr() == doctest::Approx(1.0));
  s.set_step(4);
  CHECK(opt.param_groups()[0].options.lr == doctest::Approx(0.5));
}

TEST_CASE("gradient clipping by global norm and by value") {
  Tensor a = param({0.0, 0.0}), b = param({0.0});
  a.set_grad(from_vector<double>({3, 0}, {2}).to(device()));
  b.set_grad(from_vector<double>({4}, {1}).to(device()));
  CHECK(clip_grad_norm_({a, b}, 1.0) == doctest::Approx(5.0));
  CHECK(a.grad().to_vector<double>()[0] == doctest::Approx(0.6).epsilon(1e-5));
  CHECK(b.grad().to_vector<double>()[0] == doctest::Approx(0.8).epsilon(1e-5));
  clip_grad_value_({a, b}, 0.7);
  CHECK(b.grad().item<double>() == doctest::Approx(0.7));
}
