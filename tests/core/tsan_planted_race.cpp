// The tsan preset's self-check: a kernel whose ranges all write one counter must be reported
// as a data race through cpu::parallel_for, and a correct one must not -- proof that the
// preset's scheduler makes the kernels' threads visible to ThreadSanitizer.
//   tsan_planted_race racy|clean
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <cstring>
#include <vector>

#include "cpu/cpu_backend.h"
#include "tessera/tessera.h"

int main(int argc, char** argv) {
  const bool racy = argc > 1 && std::strcmp(argv[1], "racy") == 0;
  tessera::set_num_threads(2);
  std::vector<int64_t> out(1 << 16, 0);
  int64_t shared = 0;
  // The first range waits (a bounded while) until a second thread has taken a range, so both
  // threads really run ranges whatever the scheduling.
  std::atomic<int> started{0};
  tessera::cpu::parallel_for(static_cast<int64_t>(out.size()), 1024, [&](int64_t b, int64_t e) {
    started.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (started.load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    for (int64_t i = b; i < e; ++i) out[i] = i;
    if (racy) shared += e - b;  // every range writes the same variable: a race
  });
  std::printf("%lld %lld\n", static_cast<long long>(out.back()), static_cast<long long>(shared));
  return 0;
}
