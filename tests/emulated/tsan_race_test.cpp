// ThreadSanitizer over the emulator's fibers: the planted missing-barrier kernels must be
// reported as data races, the correct kernels must run clean. One mode per process (TSan
// reports are per process): tsan_race_test correct|reduction|scan. CTest matches the report.
#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

#include "planted_kernels.h"

using namespace tessera;
using namespace tessera::planted;

namespace {
// Warp shuffles, then shared memory across a barrier: must be race-free.
TESSERA_GLOBAL void warp_sum(const int* in, int* out) {
  TESSERA_SHARED_ARRAY(int, s, kN);
  const unsigned t = gpu::thread_x(), warp = static_cast<unsigned>(gpu::warp_size());
  int v = in[t];
  for (unsigned off = warp / 2; off > 0; off >>= 1) v += gpu::shfl_down(v, static_cast<int>(off));
  if (t % warp == 0) s[t / warp] = v;
  gpu::sync_threads();
  if (t == 0) {
    int total = 0;
    for (unsigned w = 0; w < kN / warp; ++w) total += s[w];
    out[0] = total;
  }
}

int run_warp_sum() {
  std::vector<int> in(kN);
  std::iota(in.begin(), in.end(), 1);
  int out = 0;
  gpu::launch(warp_sum, {1}, {kN}, 0, true, in.data(), &out);
  return out;
}

template <bool kBuggy> int run_sum() {
  std::vector<int> in(kN);
  std::iota(in.begin(), in.end(), 1);
  int out = 0;
  gpu::launch(block_sum<kBuggy>, {1}, {kN}, 0, true, in.data(), &out);
  return out;
}
template <bool kBuggy> int run_scan() {
  std::vector<int> in(kN, 1), out(kN, 0);
  gpu::launch(inclusive_scan<kBuggy>, {1}, {kN}, 0, true, in.data(), out.data());
  return out[kN - 1];
}
}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "correct";
  for (emu::Schedule s : {emu::Schedule::forward, emu::Schedule::reverse}) {
    emu::settings().schedule = s;
    if (std::strcmp(mode, "correct") == 0) {
      std::printf("sum %d scan %d warp_sum %d\n", run_sum<false>(), run_scan<false>(), run_warp_sum());
    } else if (std::strcmp(mode, "reduction") == 0) {
      std::printf("sum %d\n", run_sum<true>());
    } else if (std::strcmp(mode, "scan") == 0) {
      std::printf("scan %d\n", run_scan<true>());
    } else {
      std::fprintf(stderr, "usage: tsan_race_test correct|reduction|scan\n");
      return 2;
    }
  }
  return 0;
}
