// Fused log_softmax + negative log likelihood with label smoothing and an ignored target.
// Per sample: loss = -((1 - eps) * logp[t] + eps / C * sum_c logp[c]); ignored samples give 0.
#include <cmath>
#include <type_traits>

#include "../common/dtype_dispatch.h"
#include "../common/row_math.h"
#include "cpu_backend.h"
#include "lanes.h"
#include "vec_math.h"

TESSERA_CPU_KERNELS_BEGIN
namespace {

template <class T, class I> void cross_entropy(const KernelCall& c) {
  using C = compute_t<T>;
  const Tensor& logits = c.inputs[0];
  const int64_t n = logits.shape()[0], classes = logits.shape()[1];
  const T* x = static_cast<const T*>(logits.data_ptr());
  const I* target = static_cast<const I*>(c.inputs[1].data_ptr());
  T* loss = static_cast<T*>(c.outputs[0].data_ptr());
  T* logp = static_cast<T*>(c.outputs[1].data_ptr());
  const double eps = c.attrs.label_smoothing;
  const int64_t ignore = c.attrs.ignore_index;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = static_cast<int64_t>(target[i]);
    if (t != ignore && (t < 0 || t >= classes)) {
      throw Error(detail::concat("cross_entropy: target ", t, " at position ", i, " is out of range for ", classes,
                                 " classes"));
    }
  }
  parallel_for(n, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(classes, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = x + r * classes;
      if constexpr (std::is_same_v<T, float>) {
        if (classes > 0) {
          // f32 rows as vectors: the 16-lane max and sums of lanes.h, exp from vec_math.h; the
          // log-sum-exp, log-probabilities and loss in double as below. sum_c logp[c] is
          // sum_c x[c] - C lse (one pass fewer than summing the stored values).
          float mx = lane_max(classes, row);
          if (!std::isfinite(mx)) mx = std::isnan(mx) ? mx : 0.0f;
          const double s = lane_sum(classes, [&](int64_t j) { return static_cast<double>(vmath::exp(row[j] - mx)); });
          const double lse = static_cast<double>(mx) + std::log(s);
          float* lp = logp + r * classes;
          for (int64_t j = 0; j < classes; ++j) lp[j] = static_cast<float>(static_cast<double>(row[j]) - lse);
          const double sum_logp = lane_sum(classes, [&](int64_t j) { return static_cast<double>(row[j]); }) - static_cast<double>(classes) * lse;
          const int64_t t = static_cast<int64_t>(target[r]);
          if (t == ignore) {
            loss[r] = 0.0f;
          } else {
            const double picked = static_cast<double>(row[t]) - lse;
            loss[r] = static_cast<float>(-((1.0 - eps) * picked + eps / static_cast<double>(classes) * sum_logp));
          }
          continue;
        }
      }
      C mx = -INFINITY;
      for (int64_t j = 0; j < classes; ++j) mx = std::max(mx, static_cast<C>(row[j]));
      if (!std::isfinite(mx)) mx = std::isnan(mx) ? mx : C(0);
      double s = 0;
      for (int64_t j = 0; j < classes; ++j) s += std::exp(static_cast<double>(static_cast<C>(row[j]) - mx));
      const double lse = static_cast<double>(mx) + std::log(s);
      double sum_logp = 0;
      T* lp = logp + r * classes;
      for (int64_t j = 0; j < classes; ++j) {
        const double v = static_cast<double>(static_cast<C>(row[j])) - lse;
        lp[j] = static_cast<T>(v);
        sum_logp += v;
      }
      const int64_t t = static_cast<int64_t>(target[r]);
      if (t == ignore) {
        loss[r] = static_cast<T>(0.0f);
        continue;
      }
      const double picked = static_cast<double>(static_cast<C>(row[t])) - lse;
      loss[r] = static_cast<T>(-((1.0 - eps) * picked + eps / static_cast<double>(classes) * sum_logp));
    }
  });
}

template <class T, class I> void cross_entropy_backward(const KernelCall& c) {
  const int64_t n = c.inputs[1].shape()[0], classes = c.inputs[1].shape()[1], ignore = c.attrs.ignore_index;
  const T* g = static_cast<const T*>(c.inputs[0].data_ptr());
  const T* logp = static_cast<const T*>(c.inputs[1].data_ptr());
  const I* target = static_cast<const I*>(c.inputs[2].data_ptr());
  T* out = static_cast<T*>(c.outputs[0].data_ptr());
  parallel_for(n, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(classes, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = static_cast<int64_t>(target[r]);
      if constexpr (std::is_same_v<T, float>) {
        // g (softmax - uniform) as one vectorised pass, then the target's element once more.
        if (t != ignore) {
          const float gr = g[r], uniform = static_cast<float>(c.attrs.label_smoothing / static_cast<double>(classes));
          const float* lp = logp + r * classes;
          float* o = out + r * classes;
          for (int64_t j = 0; j < classes; ++j) o[j] = gr * (vmath::exp(lp[j]) - uniform);
          o[t] = backend_common::cross_entropy_grad_at(lp[t], g[r], t, t, ignore, c.attrs.label_smoothing, classes);
          continue;
        }
      }
      for (int64_t j = 0; j < classes; ++j) {
        out[r * classes + j] =
            backend_common::cross_entropy_grad_at(logp[r * classes + j], g[r], t, j, ignore, c.attrs.label_smoothing, classes);
      }
    }
  });
}

void cross_entropy_backward_kernel(const KernelCall& c) {
  backend_common::dispatch_float(c.inputs[1].dtype(), "cross_entropy_backward", [&]<class T>() {
    if (c.inputs[2].dtype() == DType::i32) cross_entropy_backward<T, int32_t>(c);
    else cross_entropy_backward<T, int64_t>(c);
  });
}

void cross_entropy_kernel(const KernelCall& c) {
  backend_common::dispatch_float(c.inputs[0].dtype(), "cross_entropy", [&]<class T>() {
    if (c.inputs[1].dtype() == DType::i32) cross_entropy<T, int32_t>(c);
    else cross_entropy<T, int64_t>(c);
  });
}
}  // namespace

void register_cross_entropy(KernelTable& table) {
  table[OpId::CrossEntropy] = &cross_entropy_kernel;
  table[OpId::CrossEntropyBackward] = &cross_entropy_backward_kernel;
}

TESSERA_CPU_KERNELS_END
