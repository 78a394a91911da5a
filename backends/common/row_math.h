#pragma once
// Per-row bodies shared by the device backends (GPU kernels, Kokkos): each is what one thread
// computes for one row, host/device callable, so the backends differ only in how they spread
// rows over threads.
#include <cmath>
#include <cstdint>

#include "tessera/kernels/half.h"
#include "tessera/kernels/macros.h"

namespace tessera::backend_common {

/** Index of the first maximum (kMax) or minimum of row[0, len); a NaN wins and stops the scan. */
template <class T, bool kMax> TESSERA_HD_INLINE int64_t arg_extreme_row(const T* row, int64_t len) {
  using C = compute_t<T>;
  C best = static_cast<C>(row[0]);
  int64_t bi = 0;
  for (int64_t j = 1; j < len && best == best; ++j) {
    const C v = static_cast<C>(row[j]);
    if ((kMax ? v > best : v < best) || v != v) best = v, bi = j;
  }
  return bi;
}

/**
 * Fused cross entropy of one row of logits x[0, classes): writes log_softmax to logp and the
 * loss (label smoothing eps; 0 when target == ignore) to *loss. The target is in range
 * (checked on the host before the kernel).
 */
template <class T> TESSERA_HD_INLINE void cross_entropy_row(const T* x, int64_t classes, int64_t target, int64_t ignore, double eps, T* logp,
                                                            T* loss) {
  const auto ld = [x](int64_t j) { return static_cast<double>(static_cast<compute_t<T>>(x[j])); };
  double mx = -INFINITY;
  for (int64_t j = 0; j < classes; ++j) mx = ld(j) > mx ? ld(j) : mx;
  if (mx == -INFINITY) mx = 0;  // all -inf: shift by 0; a +inf logit makes the row NaN (PyTorch)
  double s = 0;
  for (int64_t j = 0; j < classes; ++j) s += ::exp(ld(j) - mx);
  const double lse = mx + ::log(s);
  double sum_logp = 0;
  for (int64_t j = 0; j < classes; ++j) {
    const double v = ld(j) - lse;
    logp[j] = static_cast<T>(static_cast<compute_t<T>>(v));
    sum_logp += v;
  }
  if (target == ignore) {
    *loss = static_cast<T>(0.0f);
  } else {
    const double l = -((1.0 - eps) * (ld(target) - lse) + eps / static_cast<double>(classes) * sum_logp);
    *loss = static_cast<T>(static_cast<compute_t<T>>(l));
  }
}

/**
 * One element of the fused softmax + cross-entropy backward: d loss_i / d logit_ic =
 * g_i * (softmax_ic - target distribution_ic), from the forward's log-probabilities; 0 on
 * ignored rows. The smoothed target puts 1 - eps + eps / C on the class and eps / C elsewhere.
 */
template <class T> TESSERA_HD_INLINE T cross_entropy_grad_at(T logp, T g, int64_t target, int64_t cls, int64_t ignore, double eps,
                                                             int64_t classes) {
  using C = compute_t<T>;
  if (target == ignore) return static_cast<T>(C(0));
  const C uniform = static_cast<C>(eps / static_cast<double>(classes));
  const C hot = cls == target ? static_cast<C>(1.0 - eps) : C(0);
  return static_cast<T>(static_cast<C>(g) * (std::exp(static_cast<C>(logp)) - hot - uniform));
}

}  // namespace tessera::backend_common
