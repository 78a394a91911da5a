// Fused training kernels against their unfused compositions (set_fused_kernels(false)): the
// softmax + cross-entropy backward, dropout + residual add and bias + activation, every float
// dtype, forward and gradients, with label smoothing, ignored targets and a residual or none.
#include "support/checks.h"
#include "tessera/nn/optim.h"

using namespace tessera;
using namespace tessera::test;

namespace {
struct FusedScope {
  bool saved = fused_kernels();
  explicit FusedScope(bool on) { set_fused_kernels(on); }
  ~FusedScope() { set_fused_kernels(saved); }
};

Tolerance fused_tol(DType dt) {
  Tolerance t = tolerance_for(dt);
  if (dt == DType::f32) t.atol = std::max(t.atol, 1e-6);
  return t;
}
}  // namespace

TEST_CASE("fused softmax + cross-entropy backward matches the composed gradient") {
  const Tensor target = from_vector<int64_t>({3, 0, -100, 6, 2, 2, 5, -100, 1}, {9}).to(device());
  uint64_t seed = 40;
  for (DType dt : kFloatTypes) {
    for (double smoothing : {0.0, 0.1}) {
      for (Reduction red : {Reduction::mean, Reduction::sum}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(smoothing);
        const Tensor x0 = make_input({9, 7}, dt, ++seed, -3, 3);
        auto grad = [&](bool fused) {
          const FusedScope scope(fused);
          Tensor x = x0.detach().set_requires_grad();
          cross_entropy(x, target, red, smoothing).backward();
          return x.grad();
        };
        const Tensor fused = grad(true), composed = grad(false);
        CHECK(fused.dtype() == dt);
        TESSERA_CHECK_CLOSE(fused, to_ref(composed), fused_tol(dt));
        // Ignored rows get exactly zero.
        CHECK(sum(abs(fused.narrow(0, 2, 1))).item<double>() == 0.0);
      }
    }
  }
}

TEST_CASE("fused dropout + residual add matches bernoulli-mask dropout, forward and backward") {
  uint64_t seed = 60;
  for (DType dt : kFloatTypes) {
    for (bool with_residual : {false, true}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(with_residual);
      const Tensor x0 = make_input({33, 17}, dt, ++seed), r0 = make_input({33, 17}, dt, ++seed);
      auto run = [&](bool fused, DType compute) {
        const FusedScope scope(fused);
        Generator gen(1234);
        Tensor x = x0.to(compute).detach().set_requires_grad(), r = r0.to(compute).detach().set_requires_grad();
        const Tensor y = with_residual ? dropout_add(x, r, 0.3, true, &gen) : dropout(x, 0.3, true, &gen);
        sum(mul(y, y)).backward();
        return std::tuple{y, x.grad(), with_residual ? r.grad() : Tensor()};
      };
      // The reference: the unfused composition in f64 (for f16/bf16 it would round x * scale
      // before adding the residual, which the fused kernel does not) or in the same dtype.
      const DType ref_dt = dt == DType::f16 || dt == DType::bf16 ? DType::f64 : dt;
      const auto [yf, gxf, grf] = run(true, dt);
      const auto [yu, gxu, gru] = run(false, ref_dt);
      TESSERA_CHECK_CLOSE(yf, round_to(to_ref(yu), dt), fused_tol(dt));
      TESSERA_CHECK_CLOSE(gxf, round_to(to_ref(gxu), dt), fused_tol(dt));
      if (with_residual) TESSERA_CHECK_CLOSE(grf, round_to(to_ref(gru), dt), fused_tol(dt));
      // About 30% dropped (561 elements): the same mask both ways.
      const double dropped = sum(eq(gxf, 0.0)).item<double>() / 561.0;
      CHECK(dropped > 0.2);
      CHECK(dropped < 0.4);
    }
  }
  // Eval mode and p = 0 are the identity (plus the residual).
  const Tensor x = make_input({4, 5}, DType::f32, 70), r = make_input({4, 5}, DType::f32, 71);
  TESSERA_CHECK_CLOSE(dropout_add(x, r, 0.5, false), to_ref(add(x, r)));
  TESSERA_CHECK_THROWS_WITH(dropout_add(x, make_input({5, 4}, DType::f32, 72), 0.1, true), "dropout_add: residual [5, 4]");
  // Mixed precision: a bf16 sublayer output onto an f32 residual stream is added in f32, in
  // training too (the GPT under autocast), and both get their gradients in their own dtypes.
  Tensor xb = make_input({4, 5}, DType::bf16, 73).detach().set_requires_grad(), rf = make_input({4, 5}, DType::f32, 74).detach().set_requires_grad();
  const Tensor eval = dropout_add(xb, rf, 0.5, false);
  CHECK(eval.dtype() == DType::f32);
  TESSERA_CHECK_CLOSE(eval, to_ref(add(rf, xb.to(DType::f32))));
  Generator gen(75);
  const Tensor train = dropout_add(xb, rf, 0.25, true, &gen);
  CHECK(train.dtype() == DType::f32);
  sum(train).backward();
  CHECK(xb.grad().dtype() == DType::bf16);
  CHECK(rf.grad().dtype() == DType::f32);
  TESSERA_CHECK_CLOSE(rf.grad(), to_ref(ones({4, 5})));
}

TEST_CASE("multi-tensor Adam/AdamW updates equal the per-parameter updates bit for bit") {
  // 30 parameters (more than one 24-tensor launch), varied sizes, f32 and f64 groups and bf16
  // parameters updated through f32 master weights.
  for (bool decoupled : {false, true}) {
    CAPTURE(decoupled);
    auto run = [&](bool fused) {
      const FusedScope scope(fused);
      std::vector<Tensor> params;
      for (int i = 0; i < 30; ++i) {
        const DType dt = i % 7 == 3 ? DType::f64 : i % 5 == 1 ? DType::bf16 : DType::f32;
        params.push_back(make_input({1 + (i * 37) % 300}, dt, 100 + static_cast<uint64_t>(i)).set_requires_grad());
      }
      nn::OptimOptions o;
      o.lr = 1e-2;
      o.weight_decay = 0.1;
      nn::Adam opt(params, o, decoupled);
      for (int step = 0; step < 3; ++step) {
        for (size_t i = 0; i < params.size(); ++i) {
          if (step == 1 && i == 4) continue;  // a parameter without a gradient this step
          params[i].set_grad(make_input(params[i].shape(), params[i].dtype(), 500 + static_cast<uint64_t>(step * 100 + i)));
        }
        opt.step();
        opt.zero_grad();
      }
      std::vector<std::vector<double>> out;
      for (const Tensor& p : params) out.push_back(p.to_vector<double>());
      for (const auto& [k, t] : opt.state_dict()) {
        if (k.rfind("state.", 0) == 0) out.push_back(t.to_vector<double>());
      }
      return out;
    };
    CHECK(run(true) == run(false));
  }
  std::vector<Tensor> p = {zeros({3}, DType::f32, device())}, g = {zeros({4}, DType::f32, device())}, m = p, v = p;
  TESSERA_CHECK_THROWS_WITH(adam_update_multi_(p, g, m, v, OptimizerAttrs{}), "adam_multi_update: gradient [4]");
}

TEST_CASE("fused linear + bias + activation backward matches the composed activation and linear gradients") {
  const std::pair<Activation, const char*> acts[] = {{Activation::relu, "relu"}, {Activation::sigmoid, "sigmoid"},
                                                     {Activation::tanh, "tanh"}, {Activation::gelu, "gelu"},
                                                     {Activation::gelu_tanh, "gelu_tanh"}, {Activation::silu, "silu"}};
  uint64_t seed = 800;
  for (DType dt : kFloatTypes) {
    for (const auto& [act, name] : acts) {
      CAPTURE(dtype_name(dt));
      CAPTURE(name);
      const Tensor x0 = make_input({2, 9, 24}, dt, ++seed, -1, 1), w0 = make_input({13, 24}, dt, ++seed, -1, 1);
      const Tensor b0 = make_input({13}, dt, ++seed, -1, 1), gy = make_input({2, 9, 13}, dt, ++seed, -1, 1);
      auto run = [&](bool fused) {
        const FusedScope scope(fused);
        Tensor x = x0.detach().set_requires_grad(), w = w0.detach().set_requires_grad(), b = b0.detach().set_requires_grad();
        const Tensor y = linear(x, w, b, act);
        backward({y}, {gy});
        return std::tuple{y, x.grad(), w.grad(), b.grad()};
      };
      const auto [yf, gxf, gwf, gbf] = run(true);
      const auto [yu, gxu, gwu, gbu] = run(false);
      Tolerance tol = fused_tol(dt);
      tol.atol = std::max(tol.atol, tol.rtol * 10);  // the composition rounds z once more in 16-bit dtypes
      TESSERA_CHECK_CLOSE(yf, to_ref(yu), tol);
      TESSERA_CHECK_CLOSE(gxf, to_ref(gxu), tol);
      TESSERA_CHECK_CLOSE(gwf, to_ref(gwu), tol);
      TESSERA_CHECK_CLOSE(gbf, to_ref(gbu), tol);
    }
  }
}

TEST_CASE("one-kernel activation backward matches the composed derivative for every activation") {
  using UnaryOp = Tensor (*)(const Tensor&);
  const std::pair<UnaryOp, const char*> ops[] = {
      {[](const Tensor& t) { return relu(t); }, "relu"},       {[](const Tensor& t) { return sigmoid(t); }, "sigmoid"},
      {[](const Tensor& t) { return tanh(t); }, "tanh"},       {[](const Tensor& t) { return gelu(t, false); }, "gelu"},
      {[](const Tensor& t) { return gelu(t, true); }, "gelu_tanh"}, {[](const Tensor& t) { return silu(t); }, "silu"}};
  uint64_t seed = 900;
  for (DType dt : kFloatTypes) {
    for (const auto& [op, name] : ops) {
      CAPTURE(dtype_name(dt));
      CAPTURE(name);
      // A transposed view (non-contiguous input) over [-6, 6]: both tails and the kink at 0.
      const Tensor x0 = make_input({37, 23}, dt, ++seed, -6, 6).mT(), gy = make_input({23, 37}, dt, ++seed, -1, 1);
      auto run = [&](bool fused) {
        const FusedScope scope(fused);
        Tensor x = x0.detach().set_requires_grad();
        const Tensor y = op(x.mT().mT());
        backward({y}, {gy});
        return x.grad();
      };
      const Tensor gf = run(true), gu = run(false);
      Tolerance tol = fused_tol(dt);
      tol.atol = std::max(tol.atol, tol.rtol * 10);  // the composition rounds each step in 16-bit dtypes
      TESSERA_CHECK_CLOSE(gf, to_ref(gu), tol);
    }
  }
}

TEST_CASE("bias_activation matches the activation of x + bias, forward and backward, every activation") {
  uint64_t seed = 80;
  for (DType dt : kFloatTypes) {
    for (Activation act : {Activation::none, Activation::relu, Activation::gelu, Activation::gelu_tanh, Activation::silu,
                           Activation::sigmoid, Activation::tanh}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(static_cast<int>(act));
      // 3-D input (the bias runs along the last axis), 37 columns so rows straddle every block.
      const Tensor x0 = make_input({3, 11, 37}, dt, ++seed, -4, 4), b0 = make_input({37}, dt, ++seed), w0 = make_input({3, 11, 37}, dt, ++seed);
      auto run = [&](bool fused, DType compute) {
        const FusedScope scope(fused);
        Tensor x = x0.to(compute).detach().set_requires_grad(), b = b0.to(compute).detach().set_requires_grad();
        const Tensor y = bias_activation(x, b, act);
        sum(mul(y, w0.to(compute))).backward();
        return std::tuple{y, x.grad(), b.grad()};
      };
      // The reference is the composition in f64 for the half types (it would round x + b first).
      const DType ref_dt = dt == DType::f16 || dt == DType::bf16 ? DType::f64 : dt;
      const auto [yf, gxf, gbf] = run(true, dt);
      const auto [yu, gxu, gbu] = run(false, ref_dt);
      CHECK(yf.dtype() == dt);
      // In f16/bf16 the gradient kernel rounds each dz to the dtype (relu/sigmoid/tanh take act'
      // from the rounded output: 1 - y^2 near y = 1 keeps few bits), and the bias gradient sums
      // 33 such rounded rows: absolute bounds of a few units of the dtype's epsilon.
      const bool half = dt == DType::f16 || dt == DType::bf16;
      Tolerance gx_tol = fused_tol(dt), gb_tol = fused_tol(dt);
      if (dt == DType::f32) gb_tol.atol = std::max(gb_tol.atol, 2e-5);
      if (half) gx_tol.atol = dt == DType::f16 ? 1e-3 : 8e-3, gb_tol.atol = dt == DType::f16 ? 6e-3 : 5e-2;
      TESSERA_CHECK_CLOSE(yf, round_to(to_ref(yu), dt), fused_tol(dt));
      TESSERA_CHECK_CLOSE(gxf, round_to(to_ref(gxu), dt), gx_tol);
      TESSERA_CHECK_CLOSE(gbf, round_to(to_ref(gbu), dt), gb_tol);
    }
  }
  // Bad input names the op and the shapes.
  const Tensor x = make_input({4, 5}, DType::f32, 90);
  TESSERA_CHECK_THROWS_WITH(bias_activation(x, make_input({4}, DType::f32, 91), Activation::gelu),
                            "bias_activation: bias [4] does not match input [4, 5]");
  TESSERA_CHECK_THROWS_WITH(bias_activation(x, make_input({5}, DType::f64, 92), Activation::gelu), "bias_activation: dtypes differ");
}
