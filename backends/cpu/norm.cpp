// Fused batch_norm and layer_norm, forward and backward. Statistics accumulate in double
// in a fixed order (per channel sequentially; per row in 16 lanes, lanes.h), so results do not
// depend on the thread count or the kernel set.
#include <cmath>
#include <vector>

#include "../common/dtype_dispatch.h"
#include "cpu_backend.h"
#include "lanes.h"

TESSERA_CPU_KERNELS_BEGIN
namespace {

template <class T> const T* ptr_or_null(const Tensor& t) { return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr; }

// x: [N, C, S] contiguous. Parallel over channels.
template <class T> void bn_forward(const KernelCall& c) {
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;  // statistics dtype
  const Tensor& x = c.inputs[0];
  const int64_t n = x.shape()[0], ch = x.shape()[1], sp = x.shape()[2];
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* gamma = ptr_or_null<T>(c.inputs[1]);
  const T* beta = ptr_or_null<T>(c.inputs[2]);
  T* y = static_cast<T*>(c.outputs[0].data_ptr());
  S* mean_out = static_cast<S*>(c.outputs[1].data_ptr());
  S* invstd_out = static_cast<S*>(c.outputs[2].data_ptr());
  const double m = static_cast<double>(n * sp), eps = c.attrs.eps;
  parallel_for(ch, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t k = c0; k < c1; ++k) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) {
        const T* row = xp + (i * ch + k) * sp;
        for (int64_t j = 0; j < sp; ++j) s += static_cast<double>(static_cast<compute_t<T>>(row[j]));
      }
      const double mu = s / m;
      double v = 0;
      for (int64_t i = 0; i < n; ++i) {
        const T* row = xp + (i * ch + k) * sp;
        for (int64_t j = 0; j < sp; ++j) {
          const double d = static_cast<double>(static_cast<compute_t<T>>(row[j])) - mu;
          v += d * d;
        }
      }
      const double inv = 1.0 / std::sqrt(v / m + eps);
      mean_out[k] = static_cast<S>(mu);
      invstd_out[k] = static_cast<S>(inv);
      const double scale = inv * (gamma ? static_cast<double>(static_cast<compute_t<T>>(gamma[k])) : 1.0);
      const double shift = (beta ? static_cast<double>(static_cast<compute_t<T>>(beta[k])) : 0.0) - mu * scale;
      const auto sc = static_cast<compute_t<T>>(scale), sh = static_cast<compute_t<T>>(shift);
      for (int64_t i = 0; i < n; ++i) {
        const T* row = xp + (i * ch + k) * sp;
        T* out = y + (i * ch + k) * sp;
        for (int64_t j = 0; j < sp; ++j) out[j] = static_cast<T>(static_cast<compute_t<T>>(row[j]) * sc + sh);
      }
    }
  });
}

template <class T> void bn_backward(const KernelCall& c) {
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
  using C = compute_t<T>;
  const Tensor& gout = c.inputs[0];
  const Tensor& x = c.inputs[1];
  const int64_t n = x.shape()[0], ch = x.shape()[1], sp = x.shape()[2];
  const T* gp = static_cast<const T*>(gout.data_ptr());
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* gamma = ptr_or_null<T>(c.inputs[2]);
  const S* mean = static_cast<const S*>(c.inputs[3].data_ptr());
  const S* invstd = static_cast<const S*>(c.inputs[4].data_ptr());
  T* dx = static_cast<T*>(c.outputs[0].data_ptr());
  T* dgamma = static_cast<T*>(c.outputs[1].data_ptr());
  T* dbeta = static_cast<T*>(c.outputs[2].data_ptr());
  const double m = static_cast<double>(n * sp);
  parallel_for(ch, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t k = c0; k < c1; ++k) {
      const double mu = mean[k], inv = invstd[k];
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t i = 0; i < n; ++i) {
        const T* g = gp + (i * ch + k) * sp;
        const T* xr = xp + (i * ch + k) * sp;
        for (int64_t j = 0; j < sp; ++j) {
          const double dy = static_cast<double>(static_cast<C>(g[j]));
          sum_dy += dy;
          sum_dy_xhat += dy * (static_cast<double>(static_cast<C>(xr[j])) - mu) * inv;
        }
      }
      dgamma[k] = static_cast<T>(sum_dy_xhat);
      dbeta[k] = static_cast<T>(sum_dy);
      const double gam = gamma ? static_cast<double>(static_cast<C>(gamma[k])) : 1.0;
      // dx = gamma * invstd / m * (m * dy - sum(dy) - xhat * sum(dy * xhat))
      const C a = static_cast<C>(gam * inv), b = static_cast<C>(gam * inv * sum_dy / m);
      const C cc = static_cast<C>(gam * inv * sum_dy_xhat / m);
      for (int64_t i = 0; i < n; ++i) {
        const T* g = gp + (i * ch + k) * sp;
        const T* xr = xp + (i * ch + k) * sp;
        T* d = dx + (i * ch + k) * sp;
        for (int64_t j = 0; j < sp; ++j) {
          const C xhat = (static_cast<C>(xr[j]) - static_cast<C>(mu)) * static_cast<C>(inv);
          d[j] = static_cast<T>(a * static_cast<C>(g[j]) - b - xhat * cc);
        }
      }
    }
  });
}

// x: [M, D] contiguous. Parallel over rows.
template <class T> void ln_forward(const KernelCall& c) {
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
  using C = compute_t<T>;
  const Tensor& x = c.inputs[0];
  const int64_t rows = x.shape()[0], d = x.shape()[1];
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* gamma = ptr_or_null<T>(c.inputs[1]);
  const T* beta = ptr_or_null<T>(c.inputs[2]);
  T* y = static_cast<T*>(c.outputs[0].data_ptr());
  S* mean_out = static_cast<S*>(c.outputs[1].data_ptr());
  S* rstd_out = static_cast<S*>(c.outputs[2].data_ptr());
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(d, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = xp + r * d;
      const double s = lane_sum(d, [&](int64_t j) { return static_cast<double>(static_cast<C>(row[j])); });
      const double mu = s / static_cast<double>(d);
      const double v = lane_sum(d, [&](int64_t j) {
        const double t = static_cast<double>(static_cast<C>(row[j])) - mu;
        return t * t;
      });
      const double rs = 1.0 / std::sqrt(v / static_cast<double>(d) + c.attrs.eps);
      mean_out[r] = static_cast<S>(mu);
      rstd_out[r] = static_cast<S>(rs);
      T* out = y + r * d;
      for (int64_t j = 0; j < d; ++j) {
        C val = (static_cast<C>(row[j]) - static_cast<C>(mu)) * static_cast<C>(rs);
        if (gamma) val *= static_cast<C>(gamma[j]);
        if (beta) val += static_cast<C>(beta[j]);
        out[j] = static_cast<T>(val);
      }
    }
  });
}

template <class T> void ln_backward(const KernelCall& c) {
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
  using C = compute_t<T>;
  const Tensor& x = c.inputs[1];
  const int64_t rows = x.shape()[0], d = x.shape()[1];
  const T* gp = static_cast<const T*>(c.inputs[0].data_ptr());
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* gamma = ptr_or_null<T>(c.inputs[2]);
  const S* mean = static_cast<const S*>(c.inputs[3].data_ptr());
  const S* rstd = static_cast<const S*>(c.inputs[4].data_ptr());
  T* dx = static_cast<T*>(c.outputs[0].data_ptr());
  T* dgamma = static_cast<T*>(c.outputs[1].data_ptr());
  T* dbeta = static_cast<T*>(c.outputs[2].data_ptr());
  auto xhat = [&](int64_t r, int64_t j) {
    return (static_cast<double>(static_cast<C>(xp[r * d + j])) - mean[r]) * static_cast<double>(rstd[r]);
  };
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(d, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      auto dxhat = [&](int64_t j) {
        return static_cast<double>(static_cast<C>(gp[r * d + j])) * (gamma ? static_cast<double>(static_cast<C>(gamma[j])) : 1.0);
      };
      const double mean_dxhat = lane_sum(d, dxhat) / static_cast<double>(d);
      const double mean_dxhat_xhat = lane_sum(d, [&](int64_t j) { return dxhat(j) * xhat(r, j); }) / static_cast<double>(d);
      for (int64_t j = 0; j < d; ++j) {
        const double dxh = static_cast<double>(static_cast<C>(gp[r * d + j])) * (gamma ? static_cast<double>(static_cast<C>(gamma[j])) : 1.0);
        dx[r * d + j] = static_cast<T>(static_cast<double>(rstd[r]) * (dxh - mean_dxhat - xhat(r, j) * mean_dxhat_xhat));
      }
    }
  });
  // Column sums over rows, walked in row order for every column block.
  constexpr int64_t kCols = 256;
  parallel_for((d + kCols - 1) / kCols, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t j0 = blk * kCols, j1 = std::min(d, j0 + kCols);
      std::vector<double> sg(static_cast<size_t>(j1 - j0), 0.0), sb(static_cast<size_t>(j1 - j0), 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = j0; j < j1; ++j) {
          const double g = static_cast<double>(static_cast<C>(gp[r * d + j]));
          sg[j - j0] += g * xhat(r, j);
          sb[j - j0] += g;
        }
      }
      for (int64_t j = j0; j < j1; ++j) {
        dgamma[j] = static_cast<T>(sg[j - j0]);
        dbeta[j] = static_cast<T>(sb[j - j0]);
      }
    }
  });
}

template <class T> struct BnF { void operator()(const KernelCall& c) { bn_forward<T>(c); } };
template <class T> struct BnB { void operator()(const KernelCall& c) { bn_backward<T>(c); } };
template <class T> struct LnF { void operator()(const KernelCall& c) { ln_forward<T>(c); } };
template <class T> struct LnB { void operator()(const KernelCall& c) { ln_backward<T>(c); } };
}  // namespace

void register_norm(KernelTable& table) {
  table[OpId::BatchNorm] = &float_dispatch<BnF>;
  table[OpId::BatchNormBackward] = &float_dispatch<BnB>;
  table[OpId::LayerNorm] = &float_dispatch<LnF>;
  table[OpId::LayerNormBackward] = &float_dispatch<LnB>;
}

TESSERA_CPU_KERNELS_END
