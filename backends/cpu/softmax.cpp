// softmax / log_softmax along one axis: max, then sum of exp(x - max), per line.
#include <cmath>
#include <type_traits>

#include "../common/dtype_dispatch.h"
#include "lanes.h"
#include "line_plan.h"
#if defined(TESSERA_CPU_AVX512)
#include "softmax_row_avx512.h"
#endif
#include "vec_math.h"
#include "tessera/kernels/math.h"

TESSERA_CPU_KERNELS_BEGIN
namespace {

template <bool kLog> void softmax_kernel(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  backend_common::dispatch_float(x.dtype(), op_name(c.op).data(), [&]<class T>() {
    using C = compute_t<T>;
    const LinePlan lp = make_line_plan(x, c.outputs[0], c.attrs.axis);
    if constexpr (std::is_same_v<T, float>) {
      if (lp.in_step == sizeof(float) && lp.out_step == sizeof(float)) {
        // Contiguous f32 rows (the last axis): two vectorised passes over the input (max, then
        // exp and its sum, storing exp for softmax) and one over the output. The AVX-512 set
        // takes softmax's exp and sum in one pass (softmax_row_avx512.h), with the same bits.
        parallel_lines(lp, [&](char* out_bytes, const char* in_bytes) {
          const float* in = reinterpret_cast<const float*>(in_bytes);
          float* out = reinterpret_cast<float*>(out_bytes);
          const int64_t n = lp.length;
#if defined(TESSERA_CPU_AVX512)
          float mx = softmax_avx512::row_max(in, n);
#else
          float mx = lane_max(n, in);
#endif
          if (mx == -INFINITY) mx = 0;  // see below
          if constexpr (kLog) {
            const double sum = lane_sum(n, [&](int64_t i) { return static_cast<double>(vmath::exp_nonpos(in[i] - mx)); });
            const float shift = mx + static_cast<float>(std::log(sum));
            for (int64_t i = 0; i < n; ++i) out[i] = in[i] - shift;
          } else {
#if defined(TESSERA_CPU_AVX512)
            softmax_avx512::row(in, out, n, mx, in + n);  // same bits, fewer instructions (its header)
            return;
#endif
            for (int64_t i = 0; i < n; ++i) out[i] = vmath::exp_nonpos(in[i] - mx);  // a plain loop vectorises
            const double sum = lane_sum(n, [&](int64_t i) { return static_cast<double>(out[i]); });
            const float inv = static_cast<float>(1.0 / sum);
            for (int64_t i = 0; i < n; ++i) out[i] *= inv;
          }
        });
        return;
      }
    }
    parallel_lines(lp, [&](char* out, const char* in) {
      auto at = [&](int64_t i) { return static_cast<C>(*reinterpret_cast<const T*>(in + i * lp.in_step)); };
      C mx = -INFINITY;
      for (int64_t i = 0; i < lp.length; ++i) mx = std::max(mx, at(i));  // NaN handled by the sum below
      // An all -inf line would give (-inf) - (-inf) = NaN; shifting by 0 gives exp(-inf) = 0.
      // A +inf max stays: inf - inf makes the whole line NaN, as in PyTorch.
      if (mx == C(-INFINITY)) mx = 0;
      auto out_at = [&](int64_t i) -> T& { return *reinterpret_cast<T*>(out + i * lp.out_step); };
      if constexpr (!kLog && std::is_same_v<T, C>) {
        // Full-precision outputs hold exp(x - max) between the passes: one exp per element.
        double sum = 0;
        for (int64_t i = 0; i < lp.length; ++i) {
          const C e = kmath::exp(at(i) - mx);
          out_at(i) = e;
          sum += static_cast<double>(e);
        }
        const C inv = static_cast<C>(1.0 / sum);
        for (int64_t i = 0; i < lp.length; ++i) out_at(i) = out_at(i) * inv;
        return;
      }
      double sum = 0;
      for (int64_t i = 0; i < lp.length; ++i) sum += static_cast<double>(kmath::exp(at(i) - mx));
      if constexpr (kLog) {
        const C shift = mx + static_cast<C>(std::log(sum));
        for (int64_t i = 0; i < lp.length; ++i) *reinterpret_cast<T*>(out + i * lp.out_step) = static_cast<T>(at(i) - shift);
      } else {
        const C inv = static_cast<C>(1.0 / sum);
        for (int64_t i = 0; i < lp.length; ++i) {
          *reinterpret_cast<T*>(out + i * lp.out_step) = static_cast<T>(kmath::exp(at(i) - mx) * inv);
        }
      }
    });
  });
}
}  // namespace

void register_softmax(KernelTable& table) {
  table[OpId::Softmax] = &softmax_kernel<false>;
  table[OpId::LogSoftmax] = &softmax_kernel<true>;
}

TESSERA_CPU_KERNELS_END
