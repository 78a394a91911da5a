// The emulator's racecheck (access_counters.h): a shared-memory conflict without a barrier is
// an error naming the kernel, the byte and both threads, whatever the schedule - the planted
// missing barriers that the schedule matrix catches only by a wrong result under some schedule,
// and the pattern an H200's compute-sanitizer found in the attention forward kernel: lanes read
// a shared value, reduce with shuffles, and lane 0 rewrites it (a shuffle orders no memory).
#include <doctest/doctest.h>

#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "emulated/access_counters.h"
#include "emulated/execution.h"
#include "gpu/runtime.h"
#include "planted_kernels.h"
#include "tessera/error.h"

using namespace tessera;
using namespace tessera::planted;

#if TESSERA_EMU_ACCESS_COUNTERS
namespace {
// Lanes read stat[0], agree on a maximum with shuffles, then lane 0 stores it back.
template <bool kSyncWarp> TESSERA_GLOBAL void reread_after_shuffle(const float* in, float* out) {
  TESSERA_SHARED_ARRAY(float, stat, 1);
  const unsigned t = gpu::thread_x();
  if (t == 0) stat[0] = 0.0f;
  gpu::sync_threads();
  const float old = stat[0];
  float v = in[t] > old ? in[t] : old;
  for (int m = gpu::warp_size() / 2; m > 0; m >>= 1) {
    const float o = gpu::shfl_xor(v, m);
    v = o > v ? o : v;
  }
  if (kSyncWarp) gpu::sync_warp();
  if (t == 0) stat[0] = v;
  gpu::sync_threads();
  out[t] = stat[0];
}

std::string launch_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

struct RacecheckOn {
  RacecheckOn() { emu::access::set_racecheck(true); }
  ~RacecheckOn() { emu::access::set_racecheck(false); }
};
}  // namespace

TEST_CASE("racecheck reports a missing barrier under every schedule, naming the kernel, the byte and both threads") {
  const RacecheckOn on;
  std::vector<int> in(kN);
  std::iota(in.begin(), in.end(), 1);
  int out = 0;
  const emu::Settings saved = emu::settings();
  for (emu::Schedule s : {emu::Schedule::forward, emu::Schedule::reverse, emu::Schedule::random}) {
    emu::settings().schedule = s;
    const std::string sum = launch_error([&] { gpu::launch(block_sum<true>, {1}, {kN}, 0, true, in.data(), &out); });
    CHECK(sum.find("emulated racecheck: ") == 0);
    CHECK(sum.find("hazard on shared memory byte +") != std::string::npos);
    CHECK(sum.find("thread ") != std::string::npos);
    const std::string scan = launch_error([&] { gpu::launch(inclusive_scan<true>, {1}, {kN}, 0, true, in.data(), in.data()); });
    CHECK(scan.find("hazard") != std::string::npos);
    std::iota(in.begin(), in.end(), 1);
    // The correct kernels are clean.
    CHECK(launch_error([&] { gpu::launch(block_sum<false>, {1}, {kN}, 0, true, in.data(), &out); }).empty());
    CHECK(out == static_cast<int>(kN * (kN + 1) / 2));
  }
  emu::settings() = saved;
}

TEST_CASE("racecheck: a shuffle does not order shared memory, a __syncwarp does") {
  const RacecheckOn on;
  std::vector<float> in(64), out(64);
  std::iota(in.begin(), in.end(), 0.0f);
  const std::string err = launch_error([&] { gpu::launch(reread_after_shuffle<false>, {1}, {32}, 0, true, in.data(), out.data()); });
  CHECK(err.find("write-after-read hazard") != std::string::npos);
  CHECK(err.find("or __syncwarp") == std::string::npos);  // several readers: no single thread to name
  CHECK(launch_error([&] { gpu::launch(reread_after_shuffle<true>, {1}, {32}, 0, true, in.data(), out.data()); }).empty());
  CHECK(out[5] == 31.0f);
  // Off, the same kernel runs as before.
  emu::access::set_racecheck(false);
  CHECK(launch_error([&] { gpu::launch(reread_after_shuffle<false>, {1}, {32}, 0, true, in.data(), out.data()); }).empty());
}
#endif
