#pragma once
#include <cmath>
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

/**
 * One Adam/AdamW element update. The per-call constants are converted to the compute type C
 * once on the host (construct from the attrs), so the element loop is plain arithmetic that
 * vectorises; the values equal what computing them per element in double and casting gave.
 */
template <class C> struct AdamStep {
  C decay_mul, wd, keep1, keep2, new2, sqrt_bc2, eps, step;
  bool decoupled, has_wd;
  explicit AdamStep(const OptimizerAttrs& a)
      : decay_mul(static_cast<C>(1.0 - a.lr * a.weight_decay)), wd(static_cast<C>(a.weight_decay)), keep1(static_cast<C>(1.0 - a.beta1)),
        keep2(static_cast<C>(a.beta2)), new2(static_cast<C>(1.0 - a.beta2)), sqrt_bc2(static_cast<C>(std::sqrt(a.bias_correction2))),
        eps(static_cast<C>(a.eps)), step(static_cast<C>(a.lr / a.bias_correction1)), decoupled(a.decoupled), has_wd(a.weight_decay != 0) {}
  TESSERA_HD void operator()(C& p, C& m, C& v, C g) const {
    using kmath::add_rn, kmath::mul_rn;  // no FMA contraction: every kernel rounds alike
    if (has_wd) {
      if (decoupled) p = mul_rn(p, decay_mul);
      else g = add_rn(g, mul_rn(wd, p));
    }
    m = add_rn(m, mul_rn(g - m, keep1));
    v = add_rn(mul_rn(v, keep2), mul_rn(mul_rn(g, g), new2));
    const C denom = add_rn(kmath::sqrt(v) / sqrt_bc2, eps);
    p = p - mul_rn(m / denom, step);
  }
};

/** One SGD element update (momentum, dampening, Nesterov, weight decay), constants as above. */
template <class C> struct SgdStep {
  C wd, momentum, keep, lr;
  bool has_wd, has_momentum, first, nesterov;
  explicit SgdStep(const OptimizerAttrs& a)
      : wd(static_cast<C>(a.weight_decay)), momentum(static_cast<C>(a.momentum)), keep(static_cast<C>(1.0 - a.dampening)),
        lr(static_cast<C>(a.lr)), has_wd(a.weight_decay != 0), has_momentum(a.momentum != 0), first(a.first_step), nesterov(a.nesterov) {}
  TESSERA_HD void operator()(C& p, C& buf, C g) const {
    using kmath::add_rn, kmath::mul_rn;
    if (has_wd) g = add_rn(g, mul_rn(wd, p));
    if (has_momentum) {
      buf = first ? g : add_rn(mul_rn(buf, momentum), mul_rn(g, keep));
      g = nesterov ? add_rn(g, mul_rn(buf, momentum)) : buf;
    }
    p = p - mul_rn(g, lr);
  }
};

}  // namespace kernels
}  // namespace tessera
