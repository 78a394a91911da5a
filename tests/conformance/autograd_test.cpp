// Autograd: finite-difference checks (f64) of every differentiable op of the core op list,
// including broadcasting, views, non-contiguous inputs and indexing; plus engine behaviour
// (accumulation, hooks, no_grad, detach, retain_graph, errors).
#include "support/checks.h"
#include "support/gradcheck.h"
#include "tessera/profiler.h"

using namespace tessera;
using namespace tessera::test;

namespace {
using V = std::vector<Tensor>;
}

TEST_CASE("gradients of unary ops") {
  struct Case {
    const char* name;
    Tensor (*fn)(const Tensor&);
    double lo, hi;
  };
  const Case cases[] = {
      {"neg", &neg, -2, 2},           {"abs", &tessera::abs, 0.1, 2}, {"square", &square, -2, 2},
      {"relu", &relu, -2, 2},         {"exp", &tessera::exp, -2, 2},  {"expm1", &tessera::expm1, -2, 2},
      {"log", &tessera::log, 0.2, 3}, {"log1p", &tessera::log1p, -0.5, 2}, {"sqrt", &tessera::sqrt, 0.2, 3},
      {"rsqrt", &rsqrt, 0.2, 3},      {"reciprocal", &reciprocal, 0.3, 3}, {"sin", &tessera::sin, -3, 3},
      {"cos", &tessera::cos, -3, 3},  {"tanh", &tessera::tanh, -2, 2}, {"sigmoid", &sigmoid, -4, 4},
      {"silu", &silu, -3, 3},         {"softplus", &softplus, -3, 3}, {"erf", &tessera::erf, -2, 2},
      {"sign", &sign, 0.1, 2},        {"floor", &tessera::floor, 0.1, 0.9}, {"ceil", &tessera::ceil, 0.1, 0.9},
      {"round", &tessera::round, 0.1, 0.4},  {"trunc", &tessera::trunc, 0.1, 0.9}, {"tan", &tessera::tan, -1, 1},
      {"asin", &tessera::asin, -0.8, 0.8},   {"acos", &tessera::acos, -0.8, 0.8}, {"atan", &tessera::atan, -2, 2},
      {"log2", &tessera::log2, 0.2, 3},      {"exp2", &tessera::exp2, -2, 2}, {"mish", &mish, -3, 3},
      {"hardswish", &hardswish, -2.5, 2.5},  {"hardsigmoid", &hardsigmoid, -2.5, 2.5}, {"selu", &selu, -2, 2},
      {"log10", &tessera::log10, 0.2, 3},    {"sinh", &tessera::sinh, -2, 2}, {"cosh", &tessera::cosh, -2, 2},
      {"asinh", &tessera::asinh, -3, 3},     {"acosh", &tessera::acosh, 1.2, 3}, {"atanh", &tessera::atanh, -0.8, 0.8},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    CAPTURE(c.name);
    // A transposed (non-contiguous) view of the input exercises the strided kernels too.
    TESSERA_CHECK_GRAD([&](const V& in) { return c.fn(in[0].mT()); }, {grad_input({3, 4}, ++seed, c.lo, c.hi)});
  }
  TESSERA_CHECK_GRAD([](const V& in) { return gelu(in[0], false); }, {grad_input({7}, 3, -3, 3)});
  TESSERA_CHECK_GRAD([](const V& in) { return gelu(in[0], true); }, {grad_input({7}, 4, -3, 3)});
  TESSERA_CHECK_GRAD([](const V& in) { return elu(in[0]); }, {grad_input({9}, 5, -2, 2)});
  TESSERA_CHECK_GRAD([](const V& in) { return elu(in[0], 0.5); }, {grad_input({9}, 6, -2, 2)});
  TESSERA_CHECK_GRAD([](const V& in) { return leaky_relu(in[0], 0.2); }, {grad_input({9}, 7, -2, 2)});
  TESSERA_CHECK_GRAD([](const V& in) { return softplus(in[0], 2.0, 3.0); }, {grad_input({9}, 8, -2, 2)});
  // Beyond the hardswish kinks (+-3) the slope is 0 and 1.
  TESSERA_CHECK_GRAD([](const V& in) { return hardswish(mul(in[0], 4.0)); }, {grad_input({6}, 9, 0.8, 2)});
}

TEST_CASE("gradients of atan2, fmod and remainder") {
  TESSERA_CHECK_GRAD([](const V& in) { return tessera::atan2(in[0], in[1]); }, {grad_input({3, 4}, 20, 0.5, 2), grad_input({4}, 21, -2, 2)});
  // |a| < b: no jump of trunc/floor(a / b) nearby. fmod's quotient is 0 there (d/db = 0);
  // remainder's is -1 for negative a (d/db = 1).
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  for (Fn fn : {static_cast<Fn>(&tessera::fmod), static_cast<Fn>(&tessera::remainder)}) {
    TESSERA_CHECK_GRAD([&](const V& in) { return fn(sub(in[0], 2.5), in[1]); }, {grad_input({5}, 22, 0.5, 2), grad_input({5}, 23, 2.6, 3)});
    TESSERA_CHECK_GRAD([&](const V& in) { return fn(in[0], in[1]); }, {grad_input({5}, 24, 0.5, 2), grad_input({5}, 25, 2.6, 3)});
  }
}

TEST_CASE("gradients of binary ops with broadcasting and scalars") {
  uint64_t seed = 100;
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, Fn> ops[] = {{"add", &add}, {"sub", &sub}, {"mul", &mul}, {"div", &div},
                                            {"maximum", &maximum}, {"minimum", &minimum}, {"pow", &tessera::pow}};
  for (const auto& [name, fn] : ops) {
    CAPTURE(name);
    const bool is_pow = std::string(name) == "pow";
    TESSERA_CHECK_GRAD([&](const V& in) { return fn(in[0], in[1]); },
                       {grad_input({2, 3, 4}, ++seed, 0.5, 2), grad_input({3, 1}, ++seed, is_pow ? 0.5 : -2, 2)});
    TESSERA_CHECK_GRAD([&](const V& in) { return fn(in[0].slice(1, 0, 4, 2), in[1]); },
                       {grad_input({3, 4}, ++seed, 0.5, 2), grad_input({2}, ++seed, 0.5, 2)});
  }
  TESSERA_CHECK_GRAD([](const V& in) { return add(mul(in[0], 3.0), div(2.0, in[0])); }, {grad_input({5}, 7, 0.5, 2)});
  TESSERA_CHECK_GRAD([](const V& in) { return where(gt(in[0], 0), in[0], mul(in[1], 2.0)); },
                     {grad_input({4, 3}, 8), grad_input({3}, 9)});
  TESSERA_CHECK_GRAD([](const V& in) { return clamp(in[0], -0.5, 0.5); }, {grad_input({9}, 10)});
  TESSERA_CHECK_GRAD([](const V& in) { return lerp(in[0], in[1], 0.3); }, {grad_input({4}, 11), grad_input({4}, 12)});
  TESSERA_CHECK_GRAD([](const V& in) { return cast(cast(in[0], DType::f32), DType::f64); }, {grad_input({3}, 13)}, 1e-3, 1e-4);
}

TEST_CASE("gradients of reductions, scans and softmax") {
  uint64_t seed = 200;
  const std::vector<Axes> axes_sets = {{}, {0}, {1, 2}, {-1}};
  for (const Axes& axes : axes_sets) {
    for (bool keepdim : {false, true}) {
      CAPTURE(shape_str(axes));
      CAPTURE(keepdim);
      const Tensor x = grad_input({2, 3, 4}, ++seed, 0.5, 1.5);
      TESSERA_CHECK_GRAD([&](const V& in) { return sum(in[0], axes, keepdim); }, {x});
      TESSERA_CHECK_GRAD([&](const V& in) { return mean(in[0], axes, keepdim); }, {x});
      TESSERA_CHECK_GRAD([&](const V& in) { return prod(in[0], axes, keepdim); }, {x});
      TESSERA_CHECK_GRAD([&](const V& in) { return amax(in[0], axes, keepdim); }, {x});
      TESSERA_CHECK_GRAD([&](const V& in) { return amin(in[0].permute({2, 0, 1}), axes, keepdim); }, {x});
      TESSERA_CHECK_GRAD([&](const V& in) { return var(in[0], axes, 1, keepdim); }, {x});
      TESSERA_CHECK_GRAD([&](const V& in) { return tessera::std(in[0], axes, 0, keepdim); }, {x});
      TESSERA_CHECK_GRAD([&](const V& in) { return logsumexp(in[0], axes, keepdim); }, {x});
      TESSERA_CHECK_GRAD([&](const V& in) { return norm(in[0], 2.0, axes, keepdim); }, {x});
      TESSERA_CHECK_GRAD([&](const V& in) { return norm(in[0], 1.0, axes, keepdim); }, {x});
    }
  }
  for (int64_t axis : {0, 1, -1}) {
    CAPTURE(axis);
    const Tensor x = grad_input({3, 5}, ++seed, -2, 2);
    TESSERA_CHECK_GRAD([&](const V& in) { return cumsum(in[0], axis); }, {x});
    TESSERA_CHECK_GRAD([&](const V& in) { return softmax(in[0], axis); }, {x});
    TESSERA_CHECK_GRAD([&](const V& in) { return log_softmax(in[0].mT(), axis); }, {x});
  }
}

TEST_CASE("gradients of matmul and linear") {
  const std::pair<Shape, Shape> shapes[] = {{{4}, {4}}, {{3, 4}, {4}}, {{4}, {4, 2}}, {{3, 4}, {4, 5}},
                                            {{2, 3, 4}, {4, 2}}, {{2, 1, 3, 4}, {3, 4, 2}}};
  uint64_t seed = 300;
  for (const auto& [sa, sb] : shapes) {
    CAPTURE(shape_str(sa));
    CAPTURE(shape_str(sb));
    TESSERA_CHECK_GRAD([](const V& in) { return matmul(in[0], in[1]); }, {grad_input(sa, ++seed), grad_input(sb, ++seed)});
  }
  TESSERA_CHECK_GRAD([](const V& in) { return matmul(in[0].mT(), in[1]); }, {grad_input({4, 3}, 1), grad_input({4, 2}, 2)});
  for (Activation act : {Activation::none, Activation::relu, Activation::gelu, Activation::tanh, Activation::sigmoid, Activation::silu}) {
    CAPTURE(static_cast<int>(act));
    TESSERA_CHECK_GRAD([act](const V& in) { return linear(in[0], in[1], in[2], act); },
                       {grad_input({2, 3, 5}, ++seed), grad_input({4, 5}, ++seed), grad_input({4}, ++seed)});
  }
  TESSERA_CHECK_GRAD([](const V& in) { return linear(in[0], in[1]); }, {grad_input({3, 5}, 5), grad_input({2, 5}, 6)});
}

TEST_CASE("gradients through views, joins and indexing") {
  const Tensor x = grad_input({3, 4, 2}, 400);
  TESSERA_CHECK_GRAD([](const V& in) { return in[0].reshape({6, 4}).slice(0, 1, 6, 2); }, {x});
  TESSERA_CHECK_GRAD([](const V& in) { return in[0].permute({2, 0, 1}).narrow(1, 1, 2); }, {x});
  TESSERA_CHECK_GRAD([](const V& in) { return in[0].select(1, 2).unsqueeze(0).expand({3, 3, 2}); }, {x});
  TESSERA_CHECK_GRAD([](const V& in) { return in[0].flatten().squeeze(); }, {x});
  TESSERA_CHECK_GRAD([](const V& in) { return in[0].mT().contiguous().clone(); }, {x});
  TESSERA_CHECK_GRAD([](const V& in) { return cat({in[0], mul(in[1], 2.0)}, 1); }, {x, grad_input({3, 1, 2}, 401)});
  TESSERA_CHECK_GRAD([](const V& in) { return stack({in[0], in[1]}, -1); }, {grad_input({2, 3}, 402), grad_input({2, 3}, 403)});
  TESSERA_CHECK_GRAD([](const V& in) { return mul(split(in[0], 2, 1)[1], chunk(in[0], 2, 1)[0]); }, {x});
  const Tensor idx = from_vector<int64_t>({2, 0, 2, 1}, {4}).to(device());
  TESSERA_CHECK_GRAD([&](const V& in) { return index_select(in[0], 0, idx); }, {x});
  TESSERA_CHECK_GRAD([&](const V& in) { return embedding(in[0], idx.reshape({2, 2})); }, {grad_input({3, 5}, 404)});
  const Tensor gidx = from_vector<int64_t>({0, 2, 2, 1, 0, 0}, {2, 3}).to(device());
  TESSERA_CHECK_GRAD([&](const V& in) { return gather(in[0], 0, gidx); }, {grad_input({3, 3}, 405)});
  TESSERA_CHECK_GRAD([&](const V& in) { return take_along_axis(in[0], gidx.narrow(0, 0, 1), 0); }, {grad_input({3, 3}, 406)});
  TESSERA_CHECK_GRAD([&](const V& in) { return scatter_add(in[0], 0, gidx, in[1]); }, {grad_input({3, 3}, 407), grad_input({2, 4}, 408)});
}

TEST_CASE("the engine accumulates, runs hooks, honours no_grad and frees the graph") {
  Tensor w = from_vector<double>({1, 2, 3}, {3}).to(device()).set_requires_grad();
  Tensor y = sum(mul(w, w));
  y.backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  sum(w).backward();  // accumulates
  CHECK(w.grad().to_vector<double>() == std::vector<double>{3, 5, 7});
  w.set_grad(Tensor());
  Tensor h = mul(w, 3.0);
  h.retain_grad();
  double seen = 0;
  h.register_hook([&](const Tensor& g) {
    seen = sum(g).item<double>();
    return mul(g, 2.0);  // replaces the gradient flowing on
  });
  Tensor z = sum(h);
  z.backward({}, true);
  CHECK(seen == 3.0);
  CHECK(h.grad().to_vector<double>() == std::vector<double>{1, 1, 1});
  CHECK(w.grad().to_vector<double>() == std::vector<double>{6, 6, 6});
  z.backward();  // retained once
  TESSERA_CHECK_THROWS_WITH(z.backward(), "backward: sum was already used by a backward pass");
  {
    NoGradGuard guard;
    CHECK_FALSE(mul(w, 2.0).requires_grad());
  }
  CHECK(mul(w, 2.0).grad_fn_name() == "mul");
  CHECK_FALSE(w.detach().requires_grad());
  CHECK(w.is_leaf());
  TESSERA_CHECK_THROWS_WITH(mul(w, 2.0).backward(), "backward: grad can be implicitly created only for scalar outputs");
  TESSERA_CHECK_THROWS_WITH(zeros({2}, DType::f64, device()).backward(), "backward: tensor does not require grad");
  TESSERA_CHECK_THROWS_WITH(w.add_(1.0), "add_: in-place ops on tensors that require grad");  // the op called, not copy_
  TESSERA_CHECK_THROWS_WITH(w.mul_(2.0), "mul_: in-place ops on tensors that require grad");
  TESSERA_CHECK_THROWS_WITH(zeros({2}, DType::i64, device()).set_requires_grad(), "requires_grad: only floating tensors");
  // Mixed precision: an f32 leaf used in an f64 computation gets an f32 gradient.
  Tensor f = ones({2}, DType::f32, device()).set_requires_grad();
  sum(mul(f, from_vector<double>({1, 2}, {2}).to(device()))).backward();
  CHECK(f.grad().dtype() == DType::f32);
  CHECK(f.grad().to_vector<float>() == std::vector<float>{1, 2});
}

TEST_CASE("a leaf takes its gradient without a copy only when nothing else holds it") {
  // Taken: mul's backward makes a fresh gradient that only the engine holds.
  Tensor w = from_vector<double>({1, 2, 3}, {3}).to(device()).set_requires_grad();
  const void* seen = nullptr;
  w.register_hook([&](const Tensor& g) {
    seen = g.data_ptr();
    return Tensor();
  });
  sum(mul(w, w)).backward();
  CHECK(w.grad().data_ptr() == seen);
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2, 4, 6});

  // Copied: add's backward hands one tensor to both inputs, so updating one .grad in place (as
  // optimizers and clipping do) must leave the other alone.
  Tensor a = ones({3}, DType::f64, device()).set_requires_grad();
  Tensor b = ones({3}, DType::f64, device()).set_requires_grad();
  sum(mul(add(a, b), 2.0)).backward();
  CHECK(a.grad().data_ptr() != b.grad().data_ptr());
  a.grad().add_(1.0);
  CHECK(b.grad().to_vector<double>() == std::vector<double>{2, 2, 2});

  // Copied: a hook that keeps the gradient keeps its own values.
  Tensor v = ones({3}, DType::f64, device()).set_requires_grad();
  Tensor kept;
  v.register_hook([&](const Tensor& g) {
    kept = g;
    return Tensor();
  });
  sum(mul(v, 3.0)).backward();
  v.grad().mul_(0.0);
  CHECK(kept.to_vector<double>() == std::vector<double>{3, 3, 3});
  // The user's own gradient passed to backward() is never taken either.
  Tensor u = ones({3}, DType::f64, device()).set_requires_grad();
  Tensor g = from_vector<double>({1, 2, 3}, {3}).to(device());
  backward({u}, {g});
  u.grad().zero_();
  CHECK(g.to_vector<double>() == std::vector<double>{1, 2, 3});
}

TEST_CASE("backward skips the gradients of inputs that need none") {
  // A first layer's input and a frozen weight get no gradient, and their kernels do not run:
  // counted through the profiler, which records every kernel launch.
  const auto kernel_calls = [](const std::function<void()>& body, const std::string& name) {
    profile::start();
    body();
    const profile::Trace trace = profile::stop();
    int64_t calls = 0;
    for (const profile::OpSummary& s : trace.summary()) calls += s.name == name ? s.calls : 0;
    return calls;
  };
  const Tensor x = grad_input({2, 3, 6, 6}, 11), w = grad_input({4, 3, 3, 3}, 12);
  for (const bool grad_x : {false, true}) {
    for (const bool grad_w : {false, true}) {
      if (!grad_x && !grad_w) continue;
      CAPTURE(grad_x);
      CAPTURE(grad_w);
      Tensor xi = x.detach().clone().set_requires_grad(grad_x), wi = w.detach().clone().set_requires_grad(grad_w);
      const Tensor y = sum(conv2d(xi, wi, Tensor(), {1, 1}, {1, 1}));
      CHECK(kernel_calls([&] { y.backward(); }, "conv2d_input_grad") == (grad_x ? 1 : 0));
      CHECK(xi.grad().defined() == grad_x);
      CHECK(wi.grad().defined() == grad_w);
      Tensor a = grad_input({5, 3}, 13).set_requires_grad(grad_x), b = grad_input({4, 3}, 14).set_requires_grad(grad_w);
      const Tensor z = sum(linear(a, b));
      // Both gradients of linear are matmuls: one per input that wants one.
      CHECK(kernel_calls([&] { z.backward(); }, "matmul") == (grad_x ? 1 : 0) + (grad_w ? 1 : 0));
      if (grad_x) {  // matmul with a constant right-hand side: dA only (its own forward is not counted)
        Tensor a2 = a.detach().clone().set_requires_grad();
        const Tensor m = sum(matmul(a2, b.detach().mT()));
        CHECK(kernel_calls([&] { m.backward(); }, "matmul") == 1);
      }
    }
  }
  // The gradients that are computed keep their values (finite differences, one input frozen).
  const Tensor xc = x.detach(), wc = w.detach();
  TESSERA_CHECK_GRAD([&](const V& in) { return conv2d(xc, in[0], Tensor(), {1, 1}, {1, 1}); }, {grad_input({4, 3, 3, 3}, 15)});
  TESSERA_CHECK_GRAD([&](const V& in) { return conv2d(in[0], wc, Tensor(), {1, 1}, {1, 1}); }, {grad_input({2, 3, 6, 6}, 16)});
  TESSERA_CHECK_GRAD([&](const V& in) { return linear(in[0], wc.reshape({4, 27})); }, {grad_input({2, 27}, 17)});
}

TEST_CASE("method forms read as libtorch's: x.sum(1), x.mean(), x.softmax(-1), x.matmul(y), with gradients") {
  const Tensor x = make_input({3, 4}, DType::f32, 5);
  CHECK(x.sum(1).to_vector<float>() == sum(x, {1}).to_vector<float>());
  CHECK(x.sum(std::vector<int64_t>{0, 1}, true).shape() == Shape{1, 1});
  CHECK(x.mean().item<float>() == mean(x).item<float>());
  CHECK(x.max().item<float>() == amax(x).item<float>());
  CHECK(x.amin(0).to_vector<float>() == amin(x, {0}).to_vector<float>());
  CHECK(x.argmax(1).to_vector<int64_t>() == argmax(x, 1).to_vector<int64_t>());
  CHECK(x.softmax(-1).to_vector<float>() == softmax(x, -1).to_vector<float>());
  CHECK(x.matmul(x.mT()).shape() == Shape{3, 3});
  CHECK(x.abs().to_vector<float>() == tessera::abs(x).to_vector<float>());
  CHECK(x.pow(2.0).to_vector<float>() == tessera::pow(x, 2.0).to_vector<float>());
  CHECK(x.clamp(-0.5, 0.5).amax(1).max().item<float>() <= 0.5f);
  TESSERA_CHECK_GRAD([](const V& in) { return in[0].tanh().matmul(in[1]).log_softmax(1).sum(0); }, {grad_input({2, 3}, 30), grad_input({3, 4}, 31)});
}
