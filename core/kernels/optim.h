#pragma once
// Fused optimizer updates, one element at a time, shared by every backend. `C` is the compute
// type (float for f16/bf16/f32 parameters, double for f64). Formulas follow PyTorch.
#include "math.h"

namespace tessera {

/** Hyper-parameters of one fused update (bias corrections precomputed by the caller). */
struct OptimizerAttrs {
  double lr = 0, weight_decay = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, bias_correction1 = 1, bias_correction2 = 1;  // Adam
  double momentum = 0, dampening = 0;  // SGD
  bool decoupled = false;              // AdamW
  bool nesterov = false, first_step = false;  // SGD
};

namespace kernels {

struct AdamStep {
  template <class C> TESSERA_HD void operator()(C& p, C& m, C& v, C g, const OptimizerAttrs& a) const {
    if (a.weight_decay != 0) {
      if (a.decoupled) p = p * static_cast<C>(1.0 - a.lr * a.weight_decay);
      else g = g + static_cast<C>(a.weight_decay) * p;
    }
    m = m + (g - m) * static_cast<C>(1.0 - a.beta1);
    v = v * static_cast<C>(a.beta2) + g * g * static_cast<C>(1.0 - a.beta2);
    const C denom = kmath::sqrt(v) / static_cast<C>(kmath::sqrt(a.bias_correction2)) + static_cast<C>(a.eps);
    p = p - m / denom * static_cast<C>(a.lr / a.bias_correction1);
  }
};

struct SgdStep {
  template <class C> TESSERA_HD void operator()(C& p, C& buf, C g, const OptimizerAttrs& a) const {
    if (a.weight_decay != 0) g = g + static_cast<C>(a.weight_decay) * p;
    if (a.momentum != 0) {
      buf = a.first_step ? g : buf * static_cast<C>(a.momentum) + g * static_cast<C>(1.0 - a.dampening);
      g = a.nesterov ? g + buf * static_cast<C>(a.momentum) : buf;
    }
    p = p - g * static_cast<C>(a.lr);
  }
};

}  // namespace kernels
}  // namespace tessera
