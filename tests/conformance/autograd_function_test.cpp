// Custom autograd functions (tessera/autograd_function.h): gradients against finite
// differences, needs_input_grad, non-tensor arguments and saved data, a straight-through
// gradient, second use of a node, and the errors a wrong backward gets.
#include "support/checks.h"
#include "support/gradcheck.h"

using namespace tessera;
using namespace tessera::test;
using autograd::FunctionCtx;

namespace {
// y = a * x^3 + b (b a tensor, a a number): two tensor arguments and a saved scalar.
struct CubicFn : autograd::Function<CubicFn> {
  static Tensor forward(FunctionCtx* ctx, const Tensor& x, double a, const Tensor& b) {
    ctx->save_for_backward({x});
    ctx->saved_data["a"] = a;
    return add(mul(pow(x, 3.0), a), b);
  }
  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& g) {
    const Tensor& x = ctx->get_saved_variables()[0];
    const double a = std::any_cast<double>(ctx->saved_data["a"]);
    Tensor gx = ctx->needs_input_grad[0] ? mul(mul(square(x), 3.0 * a), g[0]) : Tensor();
    Tensor gb = ctx->needs_input_grad[1] ? g[0] : Tensor();
    return {gx, gb};
  }
};

// clamp with a straight-through gradient: libtorch's convention of one gradient per argument.
struct ClampST : autograd::Function<ClampST> {
  static const char* name() { return "clamp_straight_through"; }
  static Tensor forward(FunctionCtx*, const Tensor& x, double lo, double hi) { return clamp(x, lo, hi); }
  static std::vector<Tensor> backward(FunctionCtx*, const std::vector<Tensor>& g) { return {g[0], Tensor(), Tensor()}; }
};

struct WrongCount : autograd::Function<WrongCount> {
  static const char* name() { return "wrong_count"; }
  static Tensor forward(FunctionCtx*, const Tensor& x, const Tensor& y) { return add(x, y); }
  static std::vector<Tensor> backward(FunctionCtx*, const std::vector<Tensor>& g) { return {g[0]}; }
};

// Two differentiable outputs and an integer one: (x * y, x + y^2, argmax x).
struct ProdSumArg : autograd::Function<ProdSumArg> {
  static const char* name() { return "prod_sum_arg"; }
  static std::vector<Tensor> forward(FunctionCtx* ctx, const Tensor& x, const Tensor& y) {
    ctx->save_for_backward({x, y});
    return {mul(x, y), add(x, square(y)), argmax(x)};
  }
  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& g) {
    CHECK(g.size() == 3);
    CHECK_FALSE(g[2].defined());  // the integer output has no gradient
    const Tensor &x = ctx->get_saved_variables()[0], &y = ctx->get_saved_variables()[1];
    return {add(mul(g[0], y), g[1]), add(mul(g[0], x), mul(mul(g[1], y), 2.0))};
  }
};

struct MixedDtypes : autograd::Function<MixedDtypes> {
  static const char* name() { return "mixed_dtypes"; }
  static std::vector<Tensor> forward(FunctionCtx*, const Tensor& x) { return {x, x.to(DType::f32)}; }
  static std::vector<Tensor> backward(FunctionCtx*, const std::vector<Tensor>& g) { return {g[0]}; }
};

struct Identity : autograd::Function<Identity> {
  static Tensor forward(FunctionCtx*, const Tensor& x) { return x; }  // returns its input
  static std::vector<Tensor> backward(FunctionCtx*, const std::vector<Tensor>& g) { return {mul(g[0], 2.0)}; }
};
}  // namespace

TEST_CASE("a custom Function's gradients match finite differences") {
  const Tensor x = grad_input({3, 4}, 1), b = grad_input({4}, 2);  // b broadcasts: its gradient is summed down
  TESSERA_CHECK_GRAD([](const std::vector<Tensor>& in) { return CubicFn::apply(in[0], 1.5, in[1]); }, {x, b});
  // Composed with built-in ops on both sides.
  TESSERA_CHECK_GRAD([](const std::vector<Tensor>& in) { return tanh(CubicFn::apply(sin(in[0]), -0.5, in[1])); }, {x, b});
}

TEST_CASE("a custom Function sees which inputs need gradients and records nothing when none does") {
  const Tensor x = grad_input({5}, 3);
  const Tensor b = full({5}, 0.25, DType::f64, device());  // no grad
  Tensor y = CubicFn::apply(x, 2.0, b);
  CHECK(y.requires_grad());
  sum(y).backward();
  CHECK(x.grad().defined());
  CHECK_FALSE(b.grad().defined());
  const Tensor c = full({5}, 1.0, DType::f64, device());
  CHECK_FALSE(CubicFn::apply(c, 2.0, b).requires_grad());
  {
    NoGradGuard no_grad;
    CHECK_FALSE(CubicFn::apply(x, 2.0, b).requires_grad());
  }
}

TEST_CASE("a straight-through clamp passes the gradient unchanged where clamp's own would be zero") {
  const Tensor x = from_vector<double>({-3, -0.5, 0.25, 2}, {4}, device()).set_requires_grad(true);
  Tensor y = ClampST::apply(x, -1.0, 1.0);
  CHECK(y.to(kCPU).to_vector<double>() == std::vector<double>{-1, -0.5, 0.25, 1});
  sum(mul(y, 3.0)).backward();
  CHECK(x.grad().to(kCPU).to_vector<double>() == std::vector<double>{3, 3, 3, 3});
}

TEST_CASE("a custom Function that returns its input leaves the input's history alone") {
  const Tensor x = grad_input({3}, 4);
  Tensor y = Identity::apply(x);
  CHECK(x.is_leaf());  // x keeps no history
  sum(y).backward();
  CHECK(x.grad().to(kCPU).to_vector<double>() == std::vector<double>{2, 2, 2});
}

TEST_CASE("a backward with the wrong number of gradients is an error naming the function") {
  const Tensor x = grad_input({2}, 5), y = grad_input({2}, 6);
  Tensor z = WrongCount::apply(x, y);
  TESSERA_CHECK_THROWS_WITH(sum(z).backward(), "wrong_count: backward returned 1 gradients for 2 tensor arguments");
}

TEST_CASE("a custom Function with several outputs: gradients of each, zeros for an unused one, an integer output") {
  const Tensor x = grad_input({2, 3}, 7), y = grad_input({2, 3}, 8);
  // Both outputs used, composed with built-ins: finite differences.
  TESSERA_CHECK_GRAD(
      [](const std::vector<Tensor>& in) {
        const std::vector<Tensor> o = ProdSumArg::apply(in[0], in[1]);
        return add(sin(o[0]), mul(o[1], o[1]));
      },
      {x, y});
  // Only the second output used: the first one's gradient reaches backward as zeros.
  TESSERA_CHECK_GRAD([](const std::vector<Tensor>& in) { return ProdSumArg::apply(in[0], in[1])[1]; }, {x, y});
  const std::vector<Tensor> o = ProdSumArg::apply(x, y);
  CHECK(o.size() == 3);
  CHECK(o[0].requires_grad());
  CHECK_FALSE(o[2].requires_grad());
  CHECK(o[2].dtype() == DType::i64);
  CHECK(o[1].shape() == Shape{2, 3});
  // Differentiable outputs of two dtypes: refused, naming the function and both.
  TESSERA_CHECK_THROWS_WITH(MixedDtypes::apply(x), "mixed_dtypes: differentiable outputs must share one dtype and device");
}
