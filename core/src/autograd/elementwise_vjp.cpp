// vjp rules of the elementwise ops, written with public ops only.
#include <cmath>

#include "ops/dispatch.h"
#include "record.h"
#include "tessera/runtime.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"

namespace tessera::autograd {

namespace {
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// d/dx of op at x, given y = op(x); multiplied by the incoming gradient by the caller.
Tensor unary_derivative(OpId op, const Tensor& x, const Tensor& y) {
  switch (op) {
    case OpId::Neg: return full_like(x, -1);
    case OpId::Abs: return sign(x);
    case OpId::Sign:
    case OpId::Floor:
    case OpId::Ceil:
    case OpId::Round: return zeros_like(x);  // piecewise constant
    case OpId::Square: return mul(x, 2);
    // NOTE: a comparison, not y / x: the derivative at 0 is defined as 0 (like PyTorch).
    case OpId::Relu: return gt(x, 0).to(x.dtype());
    case OpId::Exp: return y;
    case OpId::Expm1: return add(y, 1);
    case OpId::Log: return reciprocal(x);
    case OpId::Log1p: return reciprocal(add(x, 1));
    case OpId::Sqrt: return div(0.5, y);
    case OpId::Rsqrt: return mul(pow(y, 3), -0.5);
    case OpId::Reciprocal: return neg(square(y));
    case OpId::Sin: return cos(x);
    case OpId::Cos: return neg(sin(x));
    case OpId::Tanh: return sub(1, square(y));
    case OpId::Sigmoid: return mul(y, sub(1, y));
    case OpId::Gelu: {  // Phi(x) + x * phi(x)
      const Tensor cdf = mul(add(erf(mul(x, kInvSqrt2)), 1), 0.5);
      const Tensor pdf = mul(exp(mul(square(x), -0.5)), kInvSqrt2Pi);
      return add(cdf, mul(x, pdf));
    }
    case OpId::GeluTanh: {
      // 1 + tanh u and 1 - tanh^2 u from e = e^{-2|u|} (2e / (1 + e) or 2 / (1 + e), and
      // 4e / (1 + e)^2): through tanh both cancel in the far negative tail, where a CPU tanh
      // saturating at 1 - 6e-8 gave -2.3e-6 for a true -2.7e-9 (the fused kernels do the same).
      const Tensor inner = mul(add(x, mul(pow(x, 3), 0.044715)), kSqrt2OverPi);
      const Tensor e = exp(mul(tessera::abs(inner), -2.0)), inv = reciprocal(add(e, 1));
      const Tensor one_plus_t = mul(where(lt(inner, 0), mul(e, 2.0), full_like(e, 2.0)), inv);
      const Tensor sech2 = mul(mul(e, 4.0), square(inv));
      const Tensor dinner = mul(add(mul(square(x), 3 * 0.044715), 1), kSqrt2OverPi);
      return add(mul(one_plus_t, 0.5), mul(mul(mul(x, 0.5), sech2), dinner));
    }
    case OpId::Silu: {
      const Tensor s = sigmoid(x);
      return mul(s, add(1, mul(x, sub(1, s))));
    }
    case OpId::Softplus: return sigmoid(x);
    case OpId::Erf: return mul(exp(neg(square(x))), 2.0 / std::sqrt(M_PI));
    case OpId::Trunc: return zeros_like(x);
    case OpId::Tan: return add(square(y), 1);
    case OpId::Asin: return rsqrt(sub(1, square(x)));
    case OpId::Acos: return neg(rsqrt(sub(1, square(x))));
    case OpId::Atan: return reciprocal(add(square(x), 1));
    case OpId::Log2: return reciprocal(mul(x, M_LN2));
    case OpId::Log10: return reciprocal(mul(x, M_LN10));
    case OpId::Sinh: return cosh(x);
    case OpId::Cosh: return sinh(x);
    case OpId::Asinh: return rsqrt(add(square(x), 1));
    case OpId::Acosh: return rsqrt(sub(square(x), 1));
    case OpId::Atanh: return reciprocal(sub(1, square(x)));
    case OpId::Exp2: return mul(y, M_LN2);
    case OpId::Mish: {  // tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2), sp = softplus(x)
      const Tensor t = tanh(softplus(x));
      return add(t, mul(mul(x, sigmoid(x)), sub(1, square(t))));
    }
    case OpId::Hardswish: {  // 0 below -3, 1 above 3, (2x + 3) / 6 between (PyTorch's choice at the kinks)
      const Tensor mid = div(add(mul(x, 2), 3), 6);
      return where(lt(x, -3), zeros_like(x), where(le(x, 3), mid, ones_like(x)));
    }
    case OpId::Hardsigmoid: return where(logical_and(gt(x, -3), lt(x, 3)), full_like(x, 1.0 / 6), zeros_like(x));
    case OpId::Elu: return where(gt(x, 0), ones_like(x), add(y, 1));
    case OpId::Selu: {
      constexpr double kScale = 1.0507009873554804934193349852946, kAlpha = 1.6732632423543772848170429916717;
      return where(gt(x, 0), full_like(x, kScale), add(y, kScale * kAlpha));
    }
    default: break;
  }
  throw Error(detail::concat(op_name(op), ": no gradient rule"));
}

// The activations with a one-kernel backward (kernels/activation.h), used while fused kernels
// are on; the composed derivatives above are the reference (set_fused_kernels(false)).
bool fused_activation(OpId op, Activation& act) {
  switch (op) {
    case OpId::Relu: act = Activation::relu; return true;
    case OpId::Sigmoid: act = Activation::sigmoid; return true;
    case OpId::Tanh: act = Activation::tanh; return true;
    case OpId::Gelu: act = Activation::gelu; return true;
    case OpId::GeluTanh: act = Activation::gelu_tanh; return true;
    case OpId::Silu: act = Activation::silu; return true;
    default: return false;
  }
}
}  // namespace

void record_unary(OpId op, const Tensor& x, Tensor& out) {
  Activation act = Activation::none;
  if (is_floating(out.dtype()) && x.dtype() == out.dtype() && fused_kernels() && fused_activation(op, act)) {
    const Tensor s = kernels::grad_from_output(act) ? saved(out) : saved(x);
    record(op_name(op).data(), {x}, out, [act, s](const Tensor& g) {
      return std::vector<Tensor>{detail::activation_backward(g, s, act)};
    });
    return;
  }
  record(op_name(op).data(), {x}, out, [op, x = saved(x), y = saved(out)](const Tensor& g) {
    return std::vector<Tensor>{mul(g, unary_derivative(op, x, y))};
  });
}

void record_binary(OpId op, const Tensor& a_in, const Tensor& b_in, Tensor& out) {
  const DTypePolicy policy = op_info(op).policy;
  if (policy == DTypePolicy::Compare || policy == DTypePolicy::Logical || policy == DTypePolicy::Bitwise) return;  // integer results
  const DType dt = out.dtype();
  const Tensor a = saved(a_in).to(dt), b = saved(b_in).to(dt), y = saved(out);
  BackwardFn fn;
  switch (op) {
    case OpId::Add: fn = [](const Tensor& g) { return std::vector<Tensor>{g, g}; }; break;
    case OpId::Sub: fn = [](const Tensor& g) { return std::vector<Tensor>{g, neg(g)}; }; break;
    case OpId::Mul: fn = [a, b](const Tensor& g) { return std::vector<Tensor>{mul(g, b), mul(g, a)}; }; break;
    case OpId::Div:
      fn = [b, y](const Tensor& g) {
        const Tensor ga = div(g, b);
        return std::vector<Tensor>{ga, neg(mul(ga, y))};
      };
      break;
    case OpId::Pow:
      fn = [a, b, y](const Tensor& g) {
        // d/da = b * a^(b-1), 0 where b == 0 (0^0 would give 0 * inf); d/db = a^b * log(a), 0 where
        // a == 0 and b >= 0. Both as PyTorch's pow_backward.
        const Tensor zero = zeros({}, g.dtype(), g.device());
        const Tensor ga = where(eq(b, 0), zero, mul(g, mul(b, pow(a, sub(b, 1)))));
        const Tensor logs = where(eq(a, 0), zeros_like(a), log(a));
        const Tensor gb = where(logical_and(eq(a, 0), ge(b, 0)), zero, mul(g, mul(y, logs)));
        return std::vector<Tensor>{ga, gb};
      };
      break;
    case OpId::Maximum:
    case OpId::Minimum:
      fn = [a, b, op](const Tensor& g) {
        // Ties split the gradient evenly, like PyTorch.
        const Tensor wins = (op == OpId::Maximum ? gt(a, b) : lt(a, b)).to(g.dtype());
        const Tensor share = add(wins, mul(eq(a, b).to(g.dtype()), 0.5));
        return std::vector<Tensor>{mul(g, share), mul(g, sub(1, share))};
      };
      break;
    case OpId::Atan2:
      fn = [a, b](const Tensor& g) {
        const Tensor r2 = add(square(a), square(b));
        return std::vector<Tensor>{mul(g, div(b, r2)), mul(g, div(neg(a), r2))};
      };
      break;
    case OpId::Fmod:       // a - trunc(a / b) b: d/db = -trunc(a / b) = -(a - y) / b, exactly
    case OpId::Remainder:  // a - floor(a / b) b: likewise with floor
      fn = [a, b, y](const Tensor& g) { return std::vector<Tensor>{g, mul(g, neg(div(sub(a, y), b)))}; };
      break;
    case OpId::FloorDivide:  // piecewise constant
      fn = [](const Tensor& g) { return std::vector<Tensor>{zeros_like(g), zeros_like(g)}; };
      break;
    default: throw Error(detail::concat(op_name(op), ": no gradient rule"));
  }
  record(op_name(op).data(), {a_in, b_in}, out, std::move(fn));
}

}  // namespace tessera::autograd
