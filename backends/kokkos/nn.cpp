// Pooling (GPU: a team per plane, output rows on threads and columns on lanes; host: a plane per
// iteration; backward one plane
// per iteration, sequential within a plane so no atomics), batch/layer normalisation (a team
// per channel / row with team reductions in double; batch norm walks each sample's plane on
// vector lanes, so no element pays an index division), fused cross entropy, and the indexing ops (gather by output
// element; scatter_add with atomics).
#include <cmath>

#include "../common/nn_geometry.h"
#include "common.h"
#include "../common/index_views.h"
#include "../common/max_pool_2x2.h"
#include "../common/row_math.h"

namespace tessera::kokkos {
namespace {
using namespace backend_common::nn;

template <class T> using acc_t = compute_t<T>;
template <class T> using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

#if defined(TESSERA_KOKKOS_HOST_VMATH)
/**
 * Host spaces: plane p on one thread. The 2x2 stride-2 window (every CNN here) goes through the
 * CPU backend's vectorising block (same values and indices as max_pool_at); a team per plane
 * cost more to dispatch than its 196 outputs took (13x the CPU backend's time).
 */
template <class Acc, class T>
void max_pool_plane_host(const PoolDims& d, const T* x, int64_t p, T* y, int64_t* idx) {
  constexpr int64_t kBlock = 8;
  const bool two_by_two = d.kh == 2 && d.kw == 2 && d.sh == 2 && d.sw == 2 && d.ph == 0 && d.pw == 0 && d.dh == 1 && d.dw == 1 &&
                          2 * d.ho <= d.h && 2 * d.wo <= d.w;
  for (int64_t oh = 0; oh < d.ho; ++oh) {
    const int64_t o = (p * d.ho + oh) * d.wo;
    if (!two_by_two) {
      for (int64_t ow = 0; ow < d.wo; ++ow) max_pool_at<Acc>(d, x, p, oh, ow, o + ow, y, idx);
      continue;
    }
    const T* r0 = x + (p * d.h + 2 * oh) * d.w;
    int64_t* io = idx ? idx + o : nullptr;
    if (d.wo < kBlock) {
      backend_common::max_pool_2x2_outputs<T, 1>(r0, r0 + d.w, y + o, io, 2 * oh * d.w, 0, d.wo, d.w);
      continue;
    }
    // Whole blocks, the last moved back to overlap (outputs are recomputed, not accumulated).
    for (int64_t o0 = 0; o0 < d.wo; o0 += kBlock) {
      backend_common::max_pool_2x2_outputs<T, kBlock>(r0, r0 + d.w, y + o, io, 2 * oh * d.w, std::min(o0, d.wo - kBlock), kBlock, d.w);
    }
  }
}
#endif

template <class T> void max_pool_impl(const KernelCall& c) {
  const PoolDims d = pool_dims(c.inputs[0].shape(), c.outputs[0].shape(), c.attrs);
  const T* x = ptr<const T>(c.inputs[0]);
  T* y = ptr<T>(c.outputs[0]);
  int64_t* idx = c.outputs[1].defined() ? ptr<int64_t>(c.outputs[1]) : nullptr;  // null: no gradient needs them
#if defined(TESSERA_KOKKOS_HOST_VMATH)
  if constexpr (kHostExec) {
    for_n(
        "max_pool2d", d.planes, [=](int64_t p) { max_pool_plane_host<acc_t<T>>(d, x, p, y, idx); }, d.ho * d.wo * d.kh * d.kw);
    return;
  }
#endif
  for_each_plane(
      "max_pool2d", d.planes, d.ho, d.wo,
      KOKKOS_LAMBDA(int64_t p, int64_t oh, int64_t ow) { max_pool_at<acc_t<T>>(d, x, p, oh, ow, (p * d.ho + oh) * d.wo + ow, y, idx); });
}
void max_pool(const KernelCall& c) {
  backend_common::dispatch_float(c.outputs[0].dtype(), "max_pool2d", [&]<class T>() { max_pool_impl<T>(c); });
}
template <class T> void max_pool_bwd_impl(const KernelCall& c) {
  const PoolDims d = pool_dims(c.outputs[0].shape(), c.inputs[0].shape(), c.attrs);
  const T* g = ptr<const T>(c.inputs[0]);
  const int64_t* idx = ptr<const int64_t>(c.inputs[1]);
  T* gx = ptr<T>(c.outputs[0]);
  for_n(
      "max_pool2d_backward", d.planes, KOKKOS_LAMBDA(int64_t p) { max_pool_bwd_plane<acc_t<T>>(d, g, idx, gx, p); }, d.h * d.w);
}
void max_pool_bwd(const KernelCall& c) {
  backend_common::dispatch_float(c.outputs[0].dtype(), "max_pool2d_backward", [&]<class T>() { max_pool_bwd_impl<T>(c); });
}
template <class T> void avg_pool_impl(const KernelCall& c) {
  const PoolDims d = pool_dims(c.inputs[0].shape(), c.outputs[0].shape(), c.attrs);
  const T* x = ptr<const T>(c.inputs[0]);
  T* y = ptr<T>(c.outputs[0]);
  for_n(
      "avg_pool2d", c.outputs[0].numel(), KOKKOS_LAMBDA(int64_t i) { avg_pool_at<acc_t<T>>(d, x, i, y); }, d.kh * d.kw);
}
void avg_pool(const KernelCall& c) {
  backend_common::dispatch_float(c.outputs[0].dtype(), "avg_pool2d", [&]<class T>() { avg_pool_impl<T>(c); });
}
template <class T> void avg_pool_bwd_impl(const KernelCall& c) {
  const PoolDims d = pool_dims(c.outputs[0].shape(), c.inputs[0].shape(), c.attrs);
  const T* g = ptr<const T>(c.inputs[0]);
  T* gx = ptr<T>(c.outputs[0]);
  for_n(
      "avg_pool2d_backward", d.planes, KOKKOS_LAMBDA(int64_t p) { avg_pool_bwd_plane<acc_t<T>>(d, g, gx, p); }, d.h * d.w);
}
void avg_pool_bwd(const KernelCall& c) {
  backend_common::dispatch_float(c.outputs[0].dtype(), "avg_pool2d_backward", [&]<class T>() { avg_pool_bwd_impl<T>(c); });
}

// Batch norm over x [N, C, S]: a team per channel k; samples on team threads, each sample's
// S contiguous elements on vector lanes. f gets each element's offset.
inline TeamPolicy channel_policy(int64_t channels) { return team_policy(channels, std::min(8, TeamPolicy::vector_length_max())); }
template <class F>
KOKKOS_INLINE_FUNCTION double channel_sum(const Team& team, int64_t n, int64_t sp, int64_t ch, int64_t k, const F& f) {
  double s = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, n),
      [&](int64_t b, double& acc) {
        double row = 0;
        const int64_t base = (b * ch + k) * sp;
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, sp), [&](int64_t j, double& a) { a += f(base + j); }, row);
        acc += row;
      },
      s);
  return s;
}
template <class F>
KOKKOS_INLINE_FUNCTION void channel_for(const Team& team, int64_t n, int64_t sp, int64_t ch, int64_t k, const F& f) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](int64_t b) {
    const int64_t base = (b * ch + k) * sp;
    vector_for(team, sp, [&](int64_t j) { f(base + j); });
  });
}

// x [N, C, S]; a team per channel.
template <class T> void bn_fwd_impl(const KernelCall& c) {
  const Tensor& xt = c.inputs[0];
  using S = stat_t<T>;
  const int64_t n = xt.size(0), ch = xt.size(1), sp = xt.size(2), m = n * sp;
  const T *x = ptr<const T>(xt), *gamma = opt<T>(c.inputs[1]), *beta = opt<T>(c.inputs[2]);
  T* y = ptr<T>(c.outputs[0]);
  S *mean = ptr<S>(c.outputs[1]), *invstd = ptr<S>(c.outputs[2]);
  const double eps = c.attrs.eps;
  if (ch == 0) return;
  Kokkos::parallel_for(
      "batch_norm", channel_policy(ch), KOKKOS_LAMBDA(const Team& team) {
        const int64_t k = team.league_rank();
        const double mu = channel_sum(team, n, sp, ch, k, [&](int64_t at) { return ld(x, at); }) / static_cast<double>(m);
        const double var =
            channel_sum(team, n, sp, ch, k, [&](int64_t at) { return (ld(x, at) - mu) * (ld(x, at) - mu); }) / static_cast<double>(m);
        const double inv = 1.0 / kmath::sqrt(var + eps);
        const double scale = inv * (gamma ? ld(gamma, k) : 1.0), shift = (beta ? ld(beta, k) : 0.0) - mu * scale;
        channel_for(team, n, sp, ch, k, [&](int64_t at) { y[at] = static_cast<T>(static_cast<compute_t<T>>(ld(x, at) * scale + shift)); });
        Kokkos::single(Kokkos::PerTeam(team), [&] { mean[k] = static_cast<S>(mu), invstd[k] = static_cast<S>(inv); });
      });
}
void bn_fwd(const KernelCall& c) {
  const Tensor& xt = c.inputs[0];
  backend_common::dispatch_float(xt.dtype(), "batch_norm", [&]<class T>() { bn_fwd_impl<T>(c); });
}

template <class T> void bn_bwd_impl(const KernelCall& c) {
  const Tensor& xt = c.inputs[1];
  using S = stat_t<T>;
  const int64_t n = xt.size(0), ch = xt.size(1), sp = xt.size(2), m = n * sp;
  const T *g = ptr<const T>(c.inputs[0]), *x = ptr<const T>(xt), *gamma = opt<T>(c.inputs[2]);
  const S *mean = ptr<const S>(c.inputs[3]), *invstd = ptr<const S>(c.inputs[4]);
  T *dx = ptr<T>(c.outputs[0]), *dgamma = ptr<T>(c.outputs[1]), *dbeta = ptr<T>(c.outputs[2]);
  if (ch == 0) return;
  Kokkos::parallel_for(
      "batch_norm_backward", channel_policy(ch), KOKKOS_LAMBDA(const Team& team) {
        const int64_t k = team.league_rank();
        const double mu = static_cast<double>(mean[k]), inv = static_cast<double>(invstd[k]);
        const double sdy = channel_sum(team, n, sp, ch, k, [&](int64_t at) { return ld(g, at); });
        const double sdyx = channel_sum(team, n, sp, ch, k, [&](int64_t at) { return ld(g, at) * (ld(x, at) - mu) * inv; });
        const double gam = gamma ? ld(gamma, k) : 1.0, dm = static_cast<double>(m);
        channel_for(team, n, sp, ch, k, [&](int64_t at) {
          const double xhat = (ld(x, at) - mu) * inv;
          dx[at] = static_cast<T>(static_cast<compute_t<T>>(gam * inv / dm * (dm * ld(g, at) - sdy - xhat * sdyx)));
        });
        Kokkos::single(Kokkos::PerTeam(team), [&] {
          dgamma[k] = static_cast<T>(static_cast<compute_t<T>>(sdyx)), dbeta[k] = static_cast<T>(static_cast<compute_t<T>>(sdy));
        });
      });
}
void bn_bwd(const KernelCall& c) {
  const Tensor& xt = c.inputs[1];
  backend_common::dispatch_float(xt.dtype(), "batch_norm_backward", [&]<class T>() { bn_bwd_impl<T>(c); });
}

// x [M, D]; a team per row.
template <class T> void ln_fwd_impl(const KernelCall& c) {
  const Tensor& xt = c.inputs[0];
  using S = stat_t<T>;
  const int64_t rows = xt.size(0), d = xt.size(1);
  const T *x = ptr<const T>(xt), *gamma = opt<T>(c.inputs[1]), *beta = opt<T>(c.inputs[2]);
  T* y = ptr<T>(c.outputs[0]);
  S *mean = ptr<S>(c.outputs[1]), *rstd = ptr<S>(c.outputs[2]);
  const double eps = c.attrs.eps;
  if (rows == 0) return;
  Kokkos::parallel_for("layer_norm", rows_policy(rows), KOKKOS_LAMBDA(const Team& team) {
    const int64_t r = team.league_rank();
    const T* xr = x + r * d;
    const double mu = team_sum(team, d, [&](int64_t j) { return ld(xr, j); }) / static_cast<double>(d);
    const double var = team_sum(team, d, [&](int64_t j) { return (ld(xr, j) - mu) * (ld(xr, j) - mu); }) / static_cast<double>(d);
    const double rs = 1.0 / kmath::sqrt(var + eps);
    team_vector_for(team, d, [&](int64_t j) {
      double v = (ld(xr, j) - mu) * rs;
      if (gamma) v *= ld(gamma, j);
      if (beta) v += ld(beta, j);
      y[r * d + j] = static_cast<T>(static_cast<compute_t<T>>(v));
    });
    Kokkos::single(Kokkos::PerTeam(team), [&] { mean[r] = static_cast<S>(mu), rstd[r] = static_cast<S>(rs); });
  });
}
void ln_fwd(const KernelCall& c) {
  const Tensor& xt = c.inputs[0];
  backend_common::dispatch_float(xt.dtype(), "layer_norm", [&]<class T>() { ln_fwd_impl<T>(c); });
}

template <class T> void ln_bwd_impl(const KernelCall& c) {
  const Tensor& xt = c.inputs[1];
  using S = stat_t<T>;
  const int64_t rows = xt.size(0), d = xt.size(1);
  const T *g = ptr<const T>(c.inputs[0]), *x = ptr<const T>(xt), *gamma = opt<T>(c.inputs[2]);
  const S *mean = ptr<const S>(c.inputs[3]), *rstd = ptr<const S>(c.inputs[4]);
  T *dx = ptr<T>(c.outputs[0]), *dgamma = ptr<T>(c.outputs[1]), *dbeta = ptr<T>(c.outputs[2]);
  if (rows > 0) {
    Kokkos::parallel_for("layer_norm_backward", rows_policy(rows), KOKKOS_LAMBDA(const Team& team) {
      const int64_t r = team.league_rank();
      const double mu = static_cast<double>(mean[r]), rs = static_cast<double>(rstd[r]), dd = static_cast<double>(d);
      const auto dxh = [&](int64_t j) { return ld(g, r * d + j) * (gamma ? ld(gamma, j) : 1.0); };
      const double a = team_sum(team, d, dxh) / dd;
      const double b = team_sum(team, d, [&](int64_t j) { return dxh(j) * (ld(x, r * d + j) - mu) * rs; }) / dd;
      team_vector_for(team, d, [&](int64_t j) {
        dx[r * d + j] = static_cast<T>(static_cast<compute_t<T>>(rs * (dxh(j) - a - (ld(x, r * d + j) - mu) * rs * b)));
      });
    });
  }
  // dgamma/dbeta: one iteration per column walks the rows in order (deterministic).
  for_n(
      "layer_norm_backward", d,
      KOKKOS_LAMBDA(int64_t j) {
        double sg = 0, sb = 0;
        for (int64_t r = 0; r < rows; ++r) {
          sg += ld(g, r * d + j) * (ld(x, r * d + j) - static_cast<double>(mean[r])) * static_cast<double>(rstd[r]);
          sb += ld(g, r * d + j);
        }
        dgamma[j] = static_cast<T>(static_cast<compute_t<T>>(sg));
        dbeta[j] = static_cast<T>(static_cast<compute_t<T>>(sb));
      },
      rows);
}
void ln_bwd(const KernelCall& c) {
  const Tensor& xt = c.inputs[1];
  backend_common::dispatch_float(xt.dtype(), "layer_norm_backward", [&]<class T>() { ln_bwd_impl<T>(c); });
}

template <class T, class I> void cross_entropy_impl(const KernelCall& c) {
  const int64_t n = c.inputs[0].size(0), classes = c.inputs[0].size(1), ignore = c.attrs.ignore_index;
  const T* x = ptr<const T>(c.inputs[0]);
  const I* tgt = ptr<const I>(c.inputs[1]);
  T *loss = ptr<T>(c.outputs[0]), *logp = ptr<T>(c.outputs[1]);
  const double eps = c.attrs.label_smoothing;
  for_n(
      "cross_entropy", n,
      KOKKOS_LAMBDA(int64_t r) {
        backend_common::cross_entropy_row(x + r * classes, classes, static_cast<int64_t>(tgt[r]), ignore, eps, logp + r * classes,
                                          loss + r);
      },
      classes);
}

template <class T, class I> void cross_entropy_backward_impl(const KernelCall& c) {
  const int64_t classes = c.inputs[1].size(1), total = c.inputs[1].numel(), ignore = c.attrs.ignore_index;
  const T* g = ptr<const T>(c.inputs[0]);
  const T* logp = ptr<const T>(c.inputs[1]);
  const I* tgt = ptr<const I>(c.inputs[2]);
  T* out = ptr<T>(c.outputs[0]);
  const double eps = c.attrs.label_smoothing;
  for_n("cross_entropy_backward", total, KOKKOS_LAMBDA(int64_t i) {
    const int64_t r = i / classes;
    out[i] = backend_common::cross_entropy_grad_at(logp[i], g[r], static_cast<int64_t>(tgt[r]), i - r * classes, ignore, eps, classes);
  });
}

void cross_entropy_backward_op(const KernelCall& c) {
  backend_common::dispatch_float(c.inputs[1].dtype(), "cross_entropy_backward", [&]<class T>() {
    if (c.inputs[2].dtype() == DType::i32) cross_entropy_backward_impl<T, int32_t>(c);
    else cross_entropy_backward_impl<T, int64_t>(c);
  });
}

void cross_entropy_op(const KernelCall& c) {
  const Tensor& logits = c.inputs[0];
  const Tensor& target = c.inputs[1];
  const int64_t classes = logits.size(1), ignore = c.attrs.ignore_index;
  backend_common::check_class_targets(target, classes, ignore);
  backend_common::dispatch_float(logits.dtype(), "cross_entropy", [&]<class T>() {
    if (target.dtype() == DType::i32) cross_entropy_impl<T, int32_t>(c);
    else cross_entropy_impl<T, int64_t>(c);
  });
}
}  // namespace

void register_indexing(KernelTable& table);  // indexing.cpp

void register_nn(KernelTable& table) {
  table[OpId::MaxPool2d] = &max_pool;
  table[OpId::MaxPool2dBackward] = &max_pool_bwd;
  table[OpId::AvgPool2d] = &avg_pool;
  table[OpId::AvgPool2dBackward] = &avg_pool_bwd;
  table[OpId::BatchNorm] = &bn_fwd;
  table[OpId::BatchNormBackward] = &bn_bwd;
  table[OpId::LayerNorm] = &ln_fwd;
  table[OpId::LayerNormBackward] = &ln_bwd;
  table[OpId::CrossEntropy] = &cross_entropy_op;
  table[OpId::CrossEntropyBackward] = &cross_entropy_backward_op;
  register_indexing(table);
}

}  // namespace tessera::kokkos
