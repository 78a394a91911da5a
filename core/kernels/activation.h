#pragma once
// Activations fused into GEMM epilogues (linear, and later conv). Shared by every backend.
#include <cstdint>

#include "unary.h"

namespace tessera {

/** Activation applied by fused kernels after the bias add. */
enum class Activation : uint8_t { none, relu, gelu, gelu_tanh, silu, sigmoid, tanh };

namespace kernels {
template <class T> TESSERA_HD_INLINE T apply_activation(Activation act, T x) {
  switch (act) {
    case Activation::relu: return ReluFn{}(x);
    case Activation::gelu: return GeluFn{}(x);
    case Activation::gelu_tanh: return GeluTanhFn{}(x);
    case Activation::silu: return SiluFn{}(x);
    case Activation::sigmoid: return SigmoidFn{}(x);
    case Activation::tanh: return TanhFn{}(x);
    case Activation::none: break;
  }
  return x;
}
/** True when act'(z) is a function of y = act(z) alone, so a backward needs only the output. */
TESSERA_HD_INLINE bool grad_from_output(Activation act) {
  return act == Activation::relu || act == Activation::sigmoid || act == Activation::tanh;
}

// g * act'(z) for the activations whose derivative needs the pre-activation z.
struct GeluGradFn {  // Phi(z) + z phi(z)
  template <class T> TESSERA_HD T operator()(T g, T z) const {
    const T cdf = T(0.5) * (T(1) + kmath::erf(z * T(0.70710678118654752440)));
    const T pdf = kmath::exp(T(-0.5) * z * z) * T(0.39894228040143267794);
    return g * (cdf + z * pdf);
  }
};
struct GeluTanhGradFn {  // d/dz of z (1 + tanh(u)) / 2, u = sqrt(2/pi) (z + 0.044715 z^3)
  template <class T> TESSERA_HD T operator()(T g, T z) const {
    const T t = kmath::tanh(T(0.79788456080286535588) * (z + T(0.044715) * z * z * z));
    const T du = T(0.79788456080286535588) * (T(1) + T(3 * 0.044715) * z * z);
    return g * (T(0.5) * (T(1) + t) + T(0.5) * z * (T(1) - t * t) * du);
  }
};
struct SiluGradFn {  // s (1 + z (1 - s)), s = sigmoid(z)
  template <class T> TESSERA_HD T operator()(T g, T z) const {
    const T s = T(1) / (T(1) + kmath::exp(-z));
    return g * s * (T(1) + z * (T(1) - s));
  }
};

/** g * act'(z) from `saved`: y = act(z) for the activations of grad_from_output, z otherwise. */
template <class T> TESSERA_HD_INLINE T activation_grad(Activation act, T g, T saved) {
  switch (act) {
    case Activation::relu: return saved > T(0) ? g : T(0);
    case Activation::sigmoid: return g * saved * (T(1) - saved);
    case Activation::tanh: return g * (T(1) - saved * saved);
    case Activation::gelu: return GeluGradFn{}(g, saved);
    case Activation::gelu_tanh: return GeluTanhGradFn{}(g, saved);
    case Activation::silu: return SiluGradFn{}(g, saved);
    case Activation::none: break;
  }
  return g;
}
}  // namespace kernels
}  // namespace tessera
