// The benchmark's correctness gate (checks.h).
#include "checks.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "tessera/backend/registry.h"
#include "tessera/error.h"
#include "tessera/tessera.h"

namespace tessera::bench {

std::vector<double> host_values(const Tensor& t) { return t.to(kCPU).to(DType::f64).contiguous().to_vector<double>(); }

std::optional<std::string> compare_sampled(const Tensor& got, const Reference& ref, Tolerance tol, int64_t samples) {
  const std::vector<double> g = host_values(got);
  const int64_t n = static_cast<int64_t>(g.size());
  const int64_t count = std::min(n, samples);
  uint64_t state = 0x9E3779B97F4A7C15ULL;
  for (int64_t s = 0; s < count; ++s) {
    int64_t i = s;
    if (count < n) {  // first, last, then a fixed pseudo-random walk
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      i = s == 0 ? 0 : s == 1 ? n - 1 : static_cast<int64_t>((state >> 11) % static_cast<uint64_t>(n));
    }
    double scale = 0;
    const double want = ref(i, &scale);
    const double err = std::fabs(g[static_cast<size_t>(i)] - want);
    const double bound = tol.atol + tol.rtol * std::fabs(want) + tol.sum_rtol * scale;
    if (!(err <= bound) && !(std::isnan(want) && std::isnan(g[static_cast<size_t>(i)]))) {
      char msg[200];
      std::snprintf(msg, sizeof msg, "element %lld is %.9g, the reference %.9g (error %.3g > tolerance %.3g)", static_cast<long long>(i),
                    g[static_cast<size_t>(i)], want, err, bound);
      return std::string(msg);
    }
  }
  return std::nullopt;
}

Check unary_check(Tensor x, std::function<Tensor(const Tensor&)> op, double (*ref)(double), Tolerance tol) {
  return [x, op, ref, tol]() {
    const Tensor y = op(x);
    const std::vector<double> xs = host_values(x);
    return compare_sampled(y, [&](int64_t i, double*) { return ref(xs[static_cast<size_t>(i)]); }, tol);
  };
}

Check binary_check(Tensor a, Tensor b, std::function<Tensor(const Tensor&, const Tensor&)> op, double (*ref)(double, double), Tolerance tol) {
  return [a, b, op, ref, tol]() {
    const Tensor y = op(a, b);
    const std::vector<double> as = host_values(a), bs = host_values(b);
    const size_t bn = bs.size();
    return compare_sampled(y, [&](int64_t i, double*) { return ref(as[static_cast<size_t>(i)], bs[static_cast<size_t>(i) % bn]); }, tol);
  };
}

Check matmul_check(Tensor a, Tensor b, bool transpose_b, Tensor bias, bool relu, std::function<Tensor()> op, Tolerance tol) {
  return [=]() {
    const Tensor y = op();
    const std::vector<double> as = host_values(a), bs = host_values(b);
    const std::vector<double> biases = bias.defined() ? host_values(bias) : std::vector<double>{};
    const int64_t k = a.size(1), n = transpose_b ? b.size(0) : b.size(1);
    return compare_sampled(y,
                           [&](int64_t i, double* scale) {
                             const int64_t row = i / n, col = i % n;
                             double dot = biases.empty() ? 0.0 : biases[static_cast<size_t>(col)], mag = std::fabs(dot);
                             for (int64_t p = 0; p < k; ++p) {
                               const double term = as[static_cast<size_t>(row * k + p)] *
                                                   bs[static_cast<size_t>(transpose_b ? col * k + p : p * n + col)];
                               dot += term, mag += std::fabs(term);
                             }
                             *scale = mag;
                             return relu ? std::max(dot, 0.0) : dot;
                           },
                           tol, 512);
  };
}

void plant_wrong_kernel_from_env() {
  const char* spec = std::getenv("TESSERA_BENCH_PLANT_WRONG");
  if (!spec || !*spec) return;
  plant_wrong_kernel(spec);
  std::printf("# WARNING: TESSERA_BENCH_PLANT_WRONG=%s: that kernel's outputs are scaled by 1.01 (testing the correctness gate)\n", spec);
}

}  // namespace tessera::bench
