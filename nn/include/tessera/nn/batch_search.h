#pragma once
// Finding the largest batch that fits a device's memory (`tessera train --batch-size auto`):
// a bounded search over a caller-supplied training step that recovers from the allocator's
// OutOfMemory, timing each size that fits so the user sees what a larger batch buys.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/device.h"

namespace tessera::nn {

struct BatchSearchOptions {
  Device device = kCPU;     ///< whose allocator the step fills
  int64_t start = 32;       ///< first size tried
  int64_t max = 4096;       ///< never above this (e.g. the training set's size)
  int64_t multiple = 8;     ///< sizes between two tried ones are rounded down to this (when >= it)
  int max_trials = 14;      ///< hard bound on the sizes tried
  int timed_steps = 2;      ///< steps timed after one untimed warm-up step per size
  /** Stop refining once the gap between the largest fit and the smallest failure is at most
   *  this fraction of the fit. */
  double tolerance = 0.125;
  /** Cap on the device's bytes during the search when its allocator has none (0: on host-memory
   *  devices, 3/4 of the memory the OS reports available; on CUDA/HIP the device's own). */
  int64_t memory_budget = 0;
};

struct BatchTrial {
  int64_t batch = 0;
  bool fits = false;
  double samples_per_second = 0;  ///< over the timed steps (fits only)
  int64_t peak_bytes = 0;         ///< allocator high-water mark during the trial
  std::string error;              ///< the OutOfMemory message's first line (fails only)
};

struct BatchSearchResult {
  int64_t batch = 0;                ///< largest size that fit
  int64_t memory_budget = 0;        ///< the cap searched within (bytes; 0 = the device's own)
  std::vector<BatchTrial> trials;   ///< in the order tried
  /** One line per trial: size, fits or OOM, samples/s, peak memory. */
  std::string table() const;
};

/**
 * Runs `step(batch)` (one full training step at that batch: forward, backward, update) for
 * growing then bisected sizes, catching tessera::OutOfMemory and returning the cache to the
 * device after every trial. Doubling from `start` finds the first failure, bisection narrows
 * it to within `tolerance`; at most `max_trials` sizes are tried. Throws tessera::OutOfMemory
 * when not even batch 1 fits, and rethrows every other error of `step`.
 */
BatchSearchResult find_max_batch(const std::function<void(int64_t batch)>& step, const BatchSearchOptions& options);

/** Bytes the OS reports available (MemAvailable), 0 when unknown. */
int64_t host_memory_available();

}  // namespace tessera::nn
