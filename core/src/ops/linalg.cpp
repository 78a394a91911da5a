#include "tessera/ops/linalg.h"

#include "tessera/autocast.h"
#include "tessera/kernels/activation.h"
#include "tessera/runtime.h"

#include "autograd/record.h"
#include "dispatch.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduction.h"
#include "tessera/ops/creation.h"

namespace tessera {
namespace {
Tensor apply_activation(const Tensor& z, Activation activation);

struct LinearWants {
  bool x, weight, bias;
};
LinearWants wanted(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return {autograd::wants_grad(x), autograd::wants_grad(weight), autograd::wants_grad(bias)};
}

// The gradients of out = x @ weight^T + bias given dz = d out (after the activation's
// derivative), each only when its input wants it: a first layer's input needs none, and its
// GEMM (batch x in x out) is the layer's largest.
std::vector<Tensor> linear_grads(const Tensor& dz, const Tensor& xs, const Tensor& w, bool has_bias, LinearWants want) {
  const int64_t n = w.size(0), k = w.size(1);
  const Tensor g2 = dz.reshape({-1, n});
  return {want.x ? matmul(g2, w).reshape(xs.shape()) : Tensor(), want.weight ? matmul(g2.mT(), xs.reshape({-1, k})) : Tensor(),
          has_bias && want.bias ? sum(g2, {0}) : Tensor()};
}
}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autocast(a_in, CastPolicy::lower), b = autocast(b_in, CastPolicy::lower);
  detail::check_defined(a, "matmul", "first operand");
  detail::check_defined(b, "matmul", "second operand");
  const Device device = detail::common_device({&a, &b}, "matmul");
  TESSERA_CHECK(a.dtype() == b.dtype(), "matmul", "dtypes differ: ", a.dtype(), " and ", b.dtype());
  TESSERA_CHECK(a.dtype() != DType::boolean, "matmul", "not supported for dtype bool");
  TESSERA_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul", "both operands need at least one axis, got ",
                shape_str(a.shape()), " @ ", shape_str(b.shape()));
  const Tensor A = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor B = b.dim() == 1 ? b.unsqueeze(-1) : b;
  const int64_t m = A.size(-2), k = A.size(-1), n = B.size(-1);
  TESSERA_CHECK(B.size(-2) == k, "matmul", "inner dimensions differ: ", shape_str(a.shape()), " @ ",
                shape_str(b.shape()));
  Shape batch = broadcast_shapes(Shape(A.shape().begin(), A.shape().end() - 2),
                                 Shape(B.shape().begin(), B.shape().end() - 2), "matmul");
  Shape a_shape = batch, b_shape = batch, out_shape = batch;
  a_shape.insert(a_shape.end(), {m, k});
  b_shape.insert(b_shape.end(), {k, n});
  out_shape.insert(out_shape.end(), {m, n});
  Tensor out = empty(out_shape, a.dtype(), device);
  {
    NoGradGuard no_grad;
    const Tensor in[2] = {detail::expand_to(A, a_shape), detail::expand_to(B, b_shape)};
    if (out.numel() > 0) detail::run_kernel(OpId::Matmul, device, in, std::span<Tensor>(&out, 1));
    if (a.dim() == 1) out = out.squeeze(-2);
    if (b.dim() == 1) out = out.squeeze(-1);
  }
  if (autograd::needs_grad({&a, &b})) {
    // Work on the 2-D+ forms; the engine sums broadcast batch axes back to each input.
    autograd::record("matmul", {a, b}, out,
                     [A = autograd::saved(A), B = autograd::saved(B), out_shape, as = a.shape(), bs = b.shape(),
                      want_a = autograd::wants_grad(a), want_b = autograd::wants_grad(b)](const Tensor& g) {
                       const Tensor g2 = g.reshape(out_shape);
                       Tensor ga = want_a ? autograd::sum_to(matmul(g2, B.mT()), A.shape()).reshape(as) : Tensor();
                       Tensor gb = want_b ? autograd::sum_to(matmul(A.mT(), g2), B.shape()).reshape(bs) : Tensor();
                       return std::vector<Tensor>{ga, gb};
                     });
  }
  return out;
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, Activation activation) {
  const Tensor x = autocast(x_in, CastPolicy::lower), weight = autocast(weight_in, CastPolicy::lower),
               bias = autocast(bias_in, CastPolicy::lower);
  detail::check_defined(x, "linear", "input");
  detail::check_defined(weight, "linear", "weight");
  const Device device = detail::common_device({&x, &weight, &bias}, "linear");
  TESSERA_CHECK(weight.dim() == 2, "linear", "weight must be 2-D [out, in], got ", shape_str(weight.shape()));
  TESSERA_CHECK(x.dim() >= 1, "linear", "input must have at least one axis");
  const int64_t in_features = weight.size(1), out_features = weight.size(0);
  TESSERA_CHECK(x.size(-1) == in_features, "linear", "input ", shape_str(x.shape()), " does not match weight ",
                shape_str(weight.shape()), " (expected last axis ", in_features, ")");
  TESSERA_CHECK(x.dtype() == weight.dtype(), "linear", "dtypes differ: input ", x.dtype(), ", weight ",
                weight.dtype());
  TESSERA_CHECK(is_floating(x.dtype()), "linear", "expected a floating dtype, got ", x.dtype());
  if (bias.defined()) {
    TESSERA_CHECK(bias.dim() == 1 && bias.size(0) == out_features, "linear", "bias ", shape_str(bias.shape()),
                  " does not match weight ", shape_str(weight.shape()));
    TESSERA_CHECK(bias.dtype() == x.dtype(), "linear", "dtypes differ: input ", x.dtype(), ", bias ", bias.dtype());
  }
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  if (autograd::needs_grad({&x, &weight, &bias})) {
    if (activation != Activation::none && fused_kernels()) {
      // Fused training path. relu/sigmoid/tanh: the GEMM epilogue applies bias and activation
      // and the backward takes act' from the output (the pre-activation is never stored).
      // gelu/silu: act' needs z, so the GEMM writes z (bias in its epilogue), one kernel
      // applies the activation, and the backward is one kernel from z.
      const bool from_output = kernels::grad_from_output(activation);
      Tensor out, saved;
      {
        NoGradGuard no_grad;
        out = linear(x, weight, bias, from_output ? activation : Activation::none);
        if (!from_output) {
          saved = out;
          out = activation == Activation::silu ? silu(saved) : gelu(saved, activation == Activation::gelu_tanh);
        }
      }
      autograd::record("linear", {x, weight, bias}, out,
                       [xs = autograd::saved(x), w = autograd::saved(weight), s = autograd::saved(from_output ? out : saved),
                        activation, has_bias = bias.defined(), want = wanted(x, weight, bias)](const Tensor& g) {
                         const Tensor dz = detail::activation_backward(g, s, activation);
                         return linear_grads(dz, xs, w, has_bias, want);
                       });
      return out;
    }
    if (activation != Activation::none) {
      // Training path: the activation is recorded as its own op so its derivative is known.
      return apply_activation(linear(x, weight, bias, Activation::none), activation);
    }
    Tensor out;
    {
      NoGradGuard no_grad;
      out = linear(x, weight, bias, Activation::none);
    }
    autograd::record("linear", {x, weight, bias}, out,
                     [xs = autograd::saved(x), w = autograd::saved(weight), has_bias = bias.defined(),
                      want = wanted(x, weight, bias)](const Tensor& g) { return linear_grads(g, xs, w, has_bias, want); });
    return out;
  }
  const Tensor in[3] = {x.reshape({-1, in_features}), weight, bias};
  Tensor out = empty({in[0].size(0), out_features}, x.dtype(), device);
  if (out.numel() > 0) {
    OpAttrs attrs;
    attrs.activation = activation;
    detail::run_kernel(OpId::Linear, device, in, std::span<Tensor>(&out, 1), attrs);
  }
  return out.view(out_shape);
}

namespace {
Tensor apply_activation(const Tensor& z, Activation activation) {
  switch (activation) {
    case Activation::relu: return relu(z);
    case Activation::gelu: return gelu(z, false);
    case Activation::gelu_tanh: return gelu(z, true);
    case Activation::silu: return silu(z);
    case Activation::sigmoid: return sigmoid(z);
    case Activation::tanh: return tanh(z);
    case Activation::none: break;
  }
  return z;
}
}  // namespace

Tensor bias_activation(const Tensor& x_in, const Tensor& bias_in, Activation activation) {
  const Tensor x = autocast(x_in, CastPolicy::lower), bias = autocast(bias_in, CastPolicy::lower);
  detail::check_defined(x, "bias_activation", "input");
  detail::check_defined(bias, "bias_activation", "bias");
  const Device device = detail::common_device({&x, &bias}, "bias_activation");
  TESSERA_CHECK(is_floating(x.dtype()), "bias_activation", "expected a floating dtype, got ", x.dtype());
  TESSERA_CHECK(x.dim() >= 1, "bias_activation", "input must have at least one axis");
  TESSERA_CHECK(bias.dim() == 1 && bias.size(0) == x.size(-1), "bias_activation", "bias ", shape_str(bias.shape()),
                " does not match input ", shape_str(x.shape()), " (expected [", x.size(-1), "])");
  TESSERA_CHECK(bias.dtype() == x.dtype(), "bias_activation", "dtypes differ: input ", x.dtype(), ", bias ", bias.dtype());
  if (!fused_kernels()) return apply_activation(add(x, bias), activation);
  const int64_t n = x.size(-1);
  Tensor out = empty(x.shape(), x.dtype(), device);
  {
    NoGradGuard no_grad;
    OpAttrs attrs;
    attrs.activation = activation;
    const Tensor in[2] = {x.detach().contiguous(), bias.detach().contiguous()};
    if (out.numel() > 0) detail::run_kernel(OpId::BiasActivation, device, in, std::span<Tensor>(&out, 1), attrs);
  }
  if (autograd::needs_grad({&x, &bias})) {
    // act' from the output where it suffices; else from x with the bias added in the kernel.
    const bool from_output = kernels::grad_from_output(activation);
    autograd::record("bias_activation", {x, bias}, out,
                     [s = autograd::saved(from_output ? out : x), b = from_output ? Tensor() : autograd::saved(bias), activation,
                      n](const Tensor& g) {
                       const Tensor dz = detail::activation_backward(g, s, activation, b);
                       return std::vector<Tensor>{dz, sum(dz.reshape({-1, n}), {0})};
                     });
  }
  return out;
}

namespace detail {
Tensor activation_backward(const Tensor& g, const Tensor& saved, Activation act, const Tensor& bias) {
  Tensor dz = empty(saved.shape(), saved.dtype(), saved.device());
  OpAttrs attrs;
  attrs.activation = act;
  const Tensor in[3] = {g.to(saved.dtype()).contiguous(), saved.contiguous(), bias.defined() ? bias.contiguous() : Tensor()};
  if (dz.numel() > 0) run_kernel(OpId::ActivationBackward, saved.device(), in, std::span<Tensor>(&dz, 1), attrs);
  return dz;
}
}  // namespace detail

}  // namespace tessera
