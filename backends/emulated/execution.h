#pragma once
// A CPU emulation of the CUDA/HIP execution model, so the kernels in backends/gpu run (and are
// tested) on machines without a GPU. Blocks run in parallel on host threads; the threads of a
// block run as fibers (Boost.Context) that switch at barriers and warp shuffles, in a forward,
// reverse or seeded random order. Shared memory is a per-block arena filled with NaN bytes at
// block start and fenced by checked redzones. A barrier that not every live thread reaches, or
// threads waiting at different barriers, raises an error naming the source lines.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <source_location>
#include <string>

namespace tessera::emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

enum class Schedule { forward, reverse, random };
/** Whose launch limits a launch must respect: a launch valid on only one vendor is a bug in a
 *  kernel source shared by both, so the default enforces both. */
enum class LaunchLimits { both, cuda, hip };

/** Emulator settings; read from TESSERA_EMU_WARP (32 | 64), TESSERA_EMU_SCHEDULE
 *  (forward | reverse | random[:seed]) and TESSERA_EMU_LIMITS (both | cuda | hip) at first
 *  use, changeable for tests. */
struct Settings {
  int warp_size = 32;
  Schedule schedule = Schedule::forward;
  uint64_t seed = 1;
  LaunchLimits limits = LaunchLimits::both;
};

/** Per-block shared memory a kernel may use without an opt-in (static + dynamic): CUDA's 48 KiB. */
inline constexpr size_t kSharedMemoryLimit = 48 * 1024;

/** Throws tessera::Error when grid/block/shared memory exceed the vendor limits in `limits`:
 *  CUDA: block <= 1024 threads (x, y <= 1024, z <= 64), grid.x < 2^31, grid.y and grid.z <= 65535,
 *  48 KiB shared memory; HIP: the same block limits and, per dimension, grid x block < 2^32. */
void check_launch_limits(Dim3 grid, Dim3 block, size_t dynamic_shared, LaunchLimits limits);
Settings& settings();

/** What a kernel body sees about itself. */
struct ThreadState {
  Dim3 thread_idx, block_idx, block_dim, grid_dim;
};
const ThreadState& current();

/** Runs `body` for every thread of every block. `cooperative` kernels may use barriers,
 *  shuffles and shared memory (threads are fibers); others run threads in a plain loop. */
void launch(const std::function<void()>& body, Dim3 grid, Dim3 block, size_t dynamic_shared, bool cooperative,
            const void* kernel = nullptr);
/** Where launches get their label for the access counters (the emulated backend passes the
 *  running op's name); nullptr: unlabelled. */
void set_label_source(const char* (*source)());

/** Launch counters since the last reset (for tests and the GPU model bench): kernels launched,
 *  blocks in all of them, and the most blocks one launch had. */
struct LaunchStats {
  int64_t launches = 0, blocks = 0, max_blocks = 0;
};
LaunchStats launch_stats();
void reset_launch_stats();

void sync_threads(std::source_location where = std::source_location::current());
/** __syncwarp: every lane of the warp arrives, and shared-memory accesses before it are ordered
 *  before those after it for the warp's lanes (racecheck counts it; shuffles order nothing). */
void sync_warp(std::source_location where = std::source_location::current());
/** Warp shuffles over 64-bit payloads (narrower types are widened by the caller). */
uint64_t shuffle(uint64_t value, int src_lane, std::source_location where);
uint64_t shuffle_down(uint64_t value, int delta, std::source_location where);
uint64_t shuffle_xor(uint64_t value, int mask, std::source_location where);
/** Warp-collective gather: every lane publishes `value` and receives all lanes' values in
 *  `out[0 .. warp)` (one rendezvous; the emulated tensor-core MMA builds on it). Every lane of a
 *  full warp must take part. */
void warp_gather(uint64_t value, uint64_t* out, std::source_location where);
int lane_id();

/** Shared memory of the current block: the dynamic part, and static arrays keyed by call site. */
char* dynamic_shared();
char* static_shared(const void* key, size_t bytes);

}  // namespace tessera::emu
