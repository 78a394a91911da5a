#include "tessera/nn/batch_search.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tessera/backend/registry.h"
#include "tessera/error.h"
#include "tessera/runtime.h"

namespace tessera::nn {

int64_t host_memory_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

std::string BatchSearchResult::table() const {
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof line, "%8s  %-5s  %12s  %10s\n", "batch", "fits", "samples/s", "peak MiB");
  out << line;
  for (const BatchTrial& t : trials) {
    if (t.fits) {
      std::snprintf(line, sizeof line, "%8lld  %-5s  %12.0f  %10.1f%s\n", static_cast<long long>(t.batch), "yes", t.samples_per_second,
                    static_cast<double>(t.peak_bytes) / (1 << 20), t.batch == batch ? "  <- chosen" : "");
    } else {
      std::snprintf(line, sizeof line, "%8lld  %-5s  %12s  %10s\n", static_cast<long long>(t.batch), "OOM", "-", "-");
    }
    out << line;
  }
  return out.str();
}

namespace {

BatchTrial run_trial(const std::function<void(int64_t)>& step, int64_t batch, const BatchSearchOptions& o) {
  BatchTrial t;
  t.batch = batch;
  reset_peak_memory(o.device);
  try {
    step(batch);  // warm-up: the first step allocates what the later ones reuse
    synchronize(o.device);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o.timed_steps; ++i) step(batch);
    synchronize(o.device);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t.fits = true;
    t.samples_per_second = s > 0 ? static_cast<double>(batch * o.timed_steps) / s : 0;
  } catch (const OutOfMemory& e) {
    const std::string what = e.what();
    t.error = what.substr(0, what.find('\n'));
    synchronize(o.device);  // queued work of the failed step may still hold blocks
  }
  t.peak_bytes = memory_stats(o.device).peak_in_use_bytes;
  empty_cache(o.device);  // the next size starts from an empty cache, as the real run will
  return t;
}

// Rounds `x` down to `multiple` when that stays above `floor`.
int64_t round_down(int64_t x, int64_t multiple, int64_t floor) {
  if (multiple <= 1 || x < multiple) return x;
  const int64_t r = x / multiple * multiple;
  return r > floor ? r : x;
}

}  // namespace

BatchSearchResult find_max_batch(const std::function<void(int64_t)>& step, const BatchSearchOptions& o) {
  TESSERA_CHECK(o.max >= 1 && o.start >= 1 && o.max_trials >= 1 && o.timed_steps >= 1 && o.tolerance >= 0, "find_max_batch",
                "needs max, start, max_trials, timed_steps >= 1 and tolerance >= 0");
  BatchSearchResult result;
  // Host-memory devices never fail an allocation (the OS overcommits, then kills the process):
  // the search runs under a cap the OS can honour.
  const int64_t own_limit = memory_stats(o.device).limit_bytes;
  int64_t budget = own_limit > 0 ? own_limit : o.memory_budget;
  const bool device_memory = backend_for_device(o.device, "find_max_batch").allocations_fail_when_full();
  if (budget == 0 && !device_memory) budget = host_memory_available() / 4 * 3;
  const bool temporary_cap = own_limit == 0 && budget > 0;
  if (temporary_cap) set_memory_limit(o.device, budget);
  result.memory_budget = budget;
  struct RestoreLimit {
    Device device;
    bool on;
    ~RestoreLimit() {
      if (on) set_memory_limit(device, 0);
    }
  } restore{o.device, temporary_cap};

  int64_t fit = 0, fail = o.max + 1;  // largest size that fit, smallest that failed
  int64_t next = std::min(o.start, o.max);
  for (int i = 0; i < o.max_trials && next > fit && next < fail; ++i) {
    const BatchTrial t = run_trial(step, next, o);
    result.trials.push_back(t);
    (t.fits ? fit : fail) = next;
    if (fail == o.max + 1) {
      if (fit == o.max) break;
      next = std::min(fit * 2, o.max);  // still growing
    } else if (fit == 0) {
      next = fail / 2;  // shrinking until one fits
    } else {
      const double gap = static_cast<double>(fail - fit) / static_cast<double>(fit);
      if (fail - fit <= 1 || gap <= o.tolerance) break;
      next = round_down(fit + (fail - fit) / 2, o.multiple, fit);
    }
  }
  if (fit == 0) {
    const BatchTrial& last = result.trials.back();
    throw OutOfMemory(detail::concat("find_max_batch: not even batch ", last.batch, " fits on ", o.device.str(),
                                     budget > 0 ? detail::concat(" within ", budget >> 20, " MiB") : std::string(), ": ", last.error));
  }
  result.batch = fit;
  return result;
}

}  // namespace tessera::nn
