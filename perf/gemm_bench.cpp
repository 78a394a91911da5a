// sgemm micro-benchmark: Tessera's CPU GEMM against OpenBLAS (when built with it), measured
// interleaved (A B A B ...) in one process so the ratio survives a noisy shared machine.
// Prints one JSON object per shape. Usage: tessera_gemm_bench [threads] [sizes...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessera/tessera.h"
#ifdef TESSERA_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

using namespace tessera;

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  std::vector<int64_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  if (sizes.empty()) sizes = {256, 512, 1024, 2048};
  set_num_threads(threads);
#ifdef TESSERA_HAVE_OPENBLAS
  openblas_set_num_threads(threads > 0 ? threads : num_threads());
#endif
  for (int64_t n : sizes) {
    const Tensor a = randn({n, n}), b = randn({n, n});
    Tensor c = empty({n, n});
    const double flops = 2.0 * static_cast<double>(n) * n * n;
    const int reps = static_cast<int>(std::clamp<double>(2e10 / flops, 3, 50));
    std::vector<double> ours, peer;
    (void)matmul(a, b);
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      c = matmul(a, b);
      ours.push_back(seconds_since(t0));
#ifdef TESSERA_HAVE_OPENBLAS
      t0 = std::chrono::steady_clock::now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(n), static_cast<int>(n),
                  1.0f, a.data<float>(), static_cast<int>(n), b.data<float>(), static_cast<int>(n), 0.0f, c.data<float>(),
                  static_cast<int>(n));
      peer.push_back(seconds_since(t0));
#endif
    }
    const double m = median(ours);
    std::printf("{\"suite\": \"gemm\", \"case\": \"sgemm\", \"shape\": [%lld, %lld, %lld], \"threads\": %d, "
                "\"median_s\": %.6f, \"gflops\": %.1f",
                static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(n), num_threads(), m,
                flops / m * 1e-9);
    if (!peer.empty()) {
      const double p = median(peer);
      std::printf(", \"peer\": \"openblas\", \"peer_median_s\": %.6f, \"peer_gflops\": %.1f, \"ratio\": %.3f", p,
                  flops / p * 1e-9, p / m);
    }
    std::printf("}\n");
  }
  return 0;
}
