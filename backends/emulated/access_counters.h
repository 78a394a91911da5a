#pragma once
// Global-memory access counters for emulated kernels: how well a kernel's loads and stores
// coalesce, measured the way a GPU profiler does, without a GPU. The kernel sources are
// compiled with the compiler's ThreadSanitizer instrumentation (tsan_shim.cpp turns its
// callbacks into record() calls; no TSan runtime is linked), so every load and store a kernel
// thread makes is seen with its address, size and instruction address. At the end of a block
// the accesses of each warp are grouped per instruction and per dynamic execution (the k-th
// time each lane ran that instruction), as a GPU issues them, and each group is split into
// 32-byte sectors. Shared memory and the thread's own stack are not global memory and are left
// out. Counting is off unless enabled (the gpu-model benchmark and its tests turn it on).
#include <cstddef>
#include <cstdint>
#include <string>
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::emu::access {

/** Warp-level memory instructions, the 32-byte sectors they touched and the distinct bytes asked for. */
struct Traffic {
  int64_t requests = 0, sectors = 0, bytes = 0;
};

/** Totals for one kernel (a kernel function under one op label). */
struct KernelCounters {
  std::string label;                // the op that launched it, plus "#n" for its n-th distinct kernel
  int64_t launches = 0, blocks = 0, threads = 0;
  Traffic loads, stores;
  int64_t atomics = 0;
  int64_t footprint_sectors = 0;  // distinct sectors touched per launch, summed (a DRAM traffic estimate)
  /** Useful bytes over fetched bytes (sectors x 32), loads and stores together, in [0, 1]. */
  double efficiency() const {
    const double fetched = static_cast<double>(loads.sectors + stores.sectors) * 32.0;
    return fetched > 0 ? std::min(1.0, static_cast<double>(loads.bytes + stores.bytes) / fetched) : 1.0;
  }
  double sectors_per_request() const {
    const int64_t requests = loads.requests + stores.requests;
    return requests ? static_cast<double>(loads.sectors + stores.sectors) / static_cast<double>(requests) : 0.0;
  }
};

/** Turns counting on or off (off by default: recording costs time). */
void set_enabled(bool on);
bool enabled();
/** Clears all totals. */
void reset();
/** Totals per kernel since the last reset, in launch order of first appearance. */
std::vector<KernelCounters> snapshot();

/** The three above as a table: what `tessera bench --suite gpu-model` finds in the emulated
 *  module (entry point tessera_emulated_access_api) when the backend is a loaded module. */
struct Api {
  void (*set_enabled)(bool);
  void (*reset)();
  std::vector<KernelCounters> (*snapshot)();
};
const Api& api();

/** Called by the tsan shim for every instrumented access (only kernel threads count). */
void record(const void* addr, unsigned size, bool write, const void* pc);
void record_atomic(const void* addr);

/**
 * Shared-memory race checking, compute-sanitizer's racecheck for the emulator: every shared
 * load and store is checked against the byte's last writer and readers. Two accesses of
 * different threads, at least one a store, conflict unless a __syncthreads lies between them,
 * or, for two lanes of one warp, a __syncwarp. Warp shuffles order nothing: on hardware they
 * converge the lanes but give no memory ordering, and racecheck reports such pairs. The first
 * conflict of a block ends the launch with an error naming the kernel's op, the shared offset,
 * both threads and both instructions. Off unless TESSERA_EMU_RACECHECK=1 or set_racecheck(true).
 */
void set_racecheck(bool on);
bool racecheck();
/** The running GPU thread passed a __syncthreads / a __syncwarp (execution.cpp). */
void barrier_passed();
void warp_barrier_passed();

// Called by the emulator around blocks and GPU threads (execution.cpp).
void begin_launch(const char* label, const void* kernel, uint64_t blocks, int threads);
void begin_block(int threads, const char* shared_begin, const char* shared_end, const char* label = nullptr, int warp_size = 32);
/** GPU thread `tid` runs now on this host thread, its stack in [stack_lo, stack_hi); -1: the
 *  emulator's own code runs. */
void set_thread(int tid, const void* stack_lo = nullptr, const void* stack_hi = nullptr);
/** Called by the launch wrapper once a thread's kernel arguments are read: from here on its
 *  accesses are the kernel's (the arguments live in parameter space on a GPU, not in global memory). */
void kernel_entry();
void end_block(int warp_size);
void end_launch();

}  // namespace tessera::emu::access
