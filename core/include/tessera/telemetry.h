#pragma once
// Device telemetry: NVIDIA GPUs through NVML, AMD GPUs through ROCm SMI, both loaded with
// dlopen when first asked for (no link-time dependency: builds and machines without them are
// fine, and the reason a source is unavailable is reported instead), and the host process's
// resident memory and CPU use from /proc. `tessera info` shows them; the profiler samples them
// as counter tracks.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::telemetry {

/** One GPU's readings; a reading the library or device does not provide is empty. */
struct GpuReading {
  int index = 0;
  std::string name;
  std::optional<double> utilization_pct;     ///< busy time over the library's last sample period
  std::optional<double> memory_used_bytes, memory_total_bytes;
  std::optional<double> power_w;
  std::optional<double> temperature_c;
  std::optional<double> sm_clock_mhz, memory_clock_mhz;
};

/** A telemetry library and what it reported. */
struct GpuSource {
  std::string name;     ///< "nvml" or "rocm_smi"
  std::string library;  ///< the file that was (or would have been) loaded
  bool available = false;
  std::string reason;   ///< why not, when unavailable
  std::string driver_version;
  std::vector<GpuReading> devices;
};

/** NVML: `library` is dlopen'ed (default: TESSERA_NVML_LIBRARY, else libnvidia-ml.so.1). */
GpuSource nvml(const std::string& library = {});
/** ROCm SMI: `library` is dlopen'ed (default: TESSERA_ROCM_SMI_LIBRARY, else librocm_smi64.so*). */
GpuSource rocm_smi(const std::string& library = {});

struct HostReading {
  int64_t rss_bytes = 0;        ///< resident set of this process
  double cpu_utilization_pct = 0;  ///< this process's CPU time over wall time since the previous call (100 = one core)
  int cores = 0;
};
HostReading host();

}  // namespace tessera::telemetry
