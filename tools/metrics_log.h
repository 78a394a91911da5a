#pragma once
// `tessera train --metrics run.jsonl`: one JSON object per optimizer step, flushed as it is
// written (a run that dies leaves every finished step readable), for dashboards and for
// `perf/report.py --metrics` (loss curves as PNG).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "tessera/device.h"

namespace tessera::tools {

class MetricsLog {
 public:
  /** Opens (truncates) `path`; an empty path makes every call a no-op. Throws naming the path. */
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  /** One step: `samples` trained in it; throughput is over the wall time since the previous
   *  step (or since construction); memory is the device allocator's in-use and peak bytes. */
  void step(int64_t step, int64_t epoch, double loss, std::optional<double> lr, int64_t samples, const char* unit, Device device);

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace tessera::tools
