#include "metrics_log.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "tessera/error.h"
#include "tessera/runtime.h"

namespace tessera::tools {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  start_ = last_ = std::chrono::steady_clock::now();
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "w");
  TESSERA_CHECK(file_ != nullptr, "train", "cannot write --metrics '", path, "'");
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::step(int64_t step, int64_t epoch, double loss, std::optional<double> lr, int64_t samples, const char* unit, Device device) {
  if (!file_) return;
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  const AllocatorStats mem = memory_stats(device);
  nlohmann::json j = {{"step", step},
                      {"epoch", epoch},
                      {"loss", std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr)},
                      {"lr", lr ? nlohmann::json(*lr) : nlohmann::json(nullptr)},
                      {std::string(unit) + "_per_s", dt > 0 ? static_cast<double>(samples) / dt : 0.0},
                      {"step_s", dt},
                      {"time_s", std::chrono::duration<double>(now - start_).count()},
                      {"memory_in_use_bytes", mem.in_use_bytes},
                      {"memory_peak_bytes", mem.peak_in_use_bytes}};
  const std::string line = j.dump() + "\n";
  TESSERA_CHECK(std::fputs(line.c_str(), file_) >= 0 && std::fflush(file_) == 0, "train", "writing --metrics '", path_, "' failed");
}

}  // namespace tessera::tools
