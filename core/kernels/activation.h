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
/** g * act'(z) from y = act(z), for the activations of grad_from_output (g itself otherwise). */
template <class T> TESSERA_HD_INLINE T activation_grad_from_output(Activation act, T g, T y) {
  switch (act) {
    case Activation::relu: return y > T(0) ? g : T(0);
    case Activation::sigmoid: return g * y * (T(1) - y);
    case Activation::tanh: return g * (T(1) - y * y);
    default: return g;
  }
}
}  // namespace kernels
}  // namespace tessera
