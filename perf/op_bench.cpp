// Per-op host overhead and elementwise bandwidth of the CPU backend, against a plain
// STREAM-style triad loop run in the same process. Prints one JSON object per case.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tessera/tessera.h"

using namespace tessera;

namespace {
template <class F> double median_seconds(int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  set_num_threads(argc > 1 ? std::atoi(argv[1]) : 0);
  // Host overhead: 1-element add, 10k calls per sample.
  const Tensor one_a = ones({1}), one_b = ones({1});
  const int calls = 10000;
  const double per_call = median_seconds(15, [&] {
                            for (int i = 0; i < calls; ++i) (void)add(one_a, one_b);
                          }) / calls;
  std::printf("{\"suite\": \"overhead\", \"case\": \"add_1elem\", \"median_s\": %.9f}\n", per_call);

  // Bandwidth: c = a + b over 16M floats (3 x 64 MiB moved) vs a triad loop on raw arrays.
  const int64_t n = 16 << 20;
  const Tensor a = rand({n}), b = rand({n});
  Tensor c = empty({n});
  std::vector<float> x(n, 1.0f), y(n, 2.0f), z(n, 0.0f);
  const double bytes = 3.0 * 4.0 * static_cast<double>(n);
  double ours = 0, triad = 0;
  std::vector<double> o, t;
  for (int r = 0; r < 9; ++r) {  // interleaved A B A B
    o.push_back(median_seconds(1, [&] { c = add(a, b); }));
    t.push_back(median_seconds(1, [&] {
      float* zp = z.data();
      const float* xp = x.data();
      const float* yp = y.data();
      for (int64_t i = 0; i < n; ++i) zp[i] = xp[i] + 3.0f * yp[i];
    }));
  }
  std::sort(o.begin(), o.end());
  std::sort(t.begin(), t.end());
  ours = o[o.size() / 2];
  triad = t[t.size() / 2];
  std::printf("{\"suite\": \"elementwise\", \"case\": \"add_16M_f32\", \"threads\": %d, \"median_s\": %.6f, \"gbps\": %.1f, "
              "\"peer\": \"triad_1thread\", \"peer_median_s\": %.6f, \"peer_gbps\": %.1f}\n",
              num_threads(), ours, bytes / ours * 1e-9, triad, bytes / triad * 1e-9);
  return 0;
}
