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
}  // namespace kernels
}  // namespace tessera
