// NVML and ROCm SMI through dlopen (tessera/telemetry.h). Each library is opened and
// initialised once per path and kept for the process (their init is milliseconds; the profiler
// samples several times a second). Only C entry points with stable signatures are used; ROCm
// SMI's clock query is not (its frequency struct changed layout between releases).
#include "tessera/telemetry.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <algorithm>
#include <fstream>
#include <sstream>
#include <map>
#include <mutex>
#include <thread>

namespace tessera::telemetry {
namespace {

struct Library {
  void* handle = nullptr;
  std::string error;
  bool initialised = false;
};

// Opened once per path; never closed (a library's threads may outlive static destruction).
Library& open_library(const std::string& path, const char* init_symbol, int (*init)(void*)) {
  static std::mutex mutex;
  static auto* libraries = new std::map<std::string, Library>;
  std::lock_guard lock(mutex);
  auto [it, fresh] = libraries->try_emplace(path);
  Library& lib = it->second;
  if (!fresh) return lib;
  lib.handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (!lib.handle) {
    const char* e = dlerror();
    lib.error = e ? e : "dlopen failed";
    return lib;
  }
  if (!dlsym(lib.handle, init_symbol)) {
    lib.error = std::string(path) + " has no " + init_symbol;
    return lib;
  }
  const int rc = init(lib.handle);
  if (rc != 0) {
    lib.error = std::string(init_symbol) + " returned " + std::to_string(rc);
    return lib;
  }
  lib.initialised = true;
  return lib;
}

template <class F> F sym(void* handle, const char* name) { return reinterpret_cast<F>(dlsym(handle, name)); }

std::string from_env(const char* var, const char* fallback) {
  const char* v = std::getenv(var);
  return v && *v ? v : fallback;
}

// NVML's C API (nvml.h): every call returns nvmlReturn_t, 0 on success.
using NvmlDevice = void*;
struct NvmlUtilization {
  unsigned gpu, memory;
};
struct NvmlMemory {
  unsigned long long total, free, used;
};

}  // namespace

GpuSource nvml(const std::string& library) {
  GpuSource s;
  s.name = "nvml";
  s.library = library.empty() ? from_env("TESSERA_NVML_LIBRARY", "libnvidia-ml.so.1") : library;
  Library& lib = open_library(s.library, "nvmlInit_v2", [](void* h) { return sym<int (*)()>(h, "nvmlInit_v2")(); });
  if (!lib.initialised) {
    s.reason = lib.error;
    return s;
  }
  void* h = lib.handle;
  const auto count = sym<int (*)(unsigned*)>(h, "nvmlDeviceGetCount_v2");
  const auto by_index = sym<int (*)(unsigned, NvmlDevice*)>(h, "nvmlDeviceGetHandleByIndex_v2");
  if (!count || !by_index) {
    s.reason = s.library + " lacks nvmlDeviceGetCount_v2 / nvmlDeviceGetHandleByIndex_v2";
    return s;
  }
  s.available = true;
  char text[96] = {};
  if (const auto driver = sym<int (*)(char*, unsigned)>(h, "nvmlSystemGetDriverVersion"); driver && driver(text, sizeof text) == 0) {
    s.driver_version = text;
  }
  const auto name = sym<int (*)(NvmlDevice, char*, unsigned)>(h, "nvmlDeviceGetName");
  const auto util = sym<int (*)(NvmlDevice, NvmlUtilization*)>(h, "nvmlDeviceGetUtilizationRates");
  const auto memory = sym<int (*)(NvmlDevice, NvmlMemory*)>(h, "nvmlDeviceGetMemoryInfo");
  const auto power = sym<int (*)(NvmlDevice, unsigned*)>(h, "nvmlDeviceGetPowerUsage");
  const auto temperature = sym<int (*)(NvmlDevice, int, unsigned*)>(h, "nvmlDeviceGetTemperature");
  const auto clock = sym<int (*)(NvmlDevice, int, unsigned*)>(h, "nvmlDeviceGetClockInfo");
  unsigned n = 0;
  if (count(&n) != 0) return s;
  for (unsigned i = 0; i < n; ++i) {
    NvmlDevice d = nullptr;
    if (by_index(i, &d) != 0) continue;
    GpuReading r;
    r.index = static_cast<int>(i);
    char dn[96] = {};
    if (name && name(d, dn, sizeof dn) == 0) r.name = dn;
    NvmlUtilization u{};
    if (util && util(d, &u) == 0) r.utilization_pct = u.gpu;
    NvmlMemory m{};
    if (memory && memory(d, &m) == 0) r.memory_used_bytes = static_cast<double>(m.used), r.memory_total_bytes = static_cast<double>(m.total);
    unsigned v = 0;
    if (power && power(d, &v) == 0) r.power_w = v / 1000.0;  // milliwatts
    if (temperature && temperature(d, 0, &v) == 0) r.temperature_c = v;  // NVML_TEMPERATURE_GPU
    if (clock && clock(d, 1, &v) == 0) r.sm_clock_mhz = v;  // NVML_CLOCK_SM
    if (clock && clock(d, 2, &v) == 0) r.memory_clock_mhz = v;  // NVML_CLOCK_MEM
    s.devices.push_back(r);
  }
  return s;
}

GpuSource rocm_smi(const std::string& library) {
  GpuSource s;
  s.name = "rocm_smi";
  std::string path = library.empty() ? from_env("TESSERA_ROCM_SMI_LIBRARY", "") : library;
  const auto init = [](void* h) { return sym<int (*)(uint64_t)>(h, "rsmi_init")(0); };
  if (path.empty()) {
    // The soname moved with ROCm releases; the unversioned name needs the -dev package.
    for (const char* candidate : {"librocm_smi64.so.7", "librocm_smi64.so.6", "librocm_smi64.so.5", "librocm_smi64.so.1", "librocm_smi64.so"}) {
      path = candidate;
      if (open_library(path, "rsmi_init", init).initialised) break;
    }
  }
  s.library = path;
  Library& lib = open_library(path, "rsmi_init", init);
  if (!lib.initialised) {
    s.reason = lib.error;
    return s;
  }
  void* h = lib.handle;
  const auto count = sym<int (*)(uint32_t*)>(h, "rsmi_num_monitor_devices");
  if (!count) {
    s.reason = path + " lacks rsmi_num_monitor_devices";
    return s;
  }
  s.available = true;
  const auto name = sym<int (*)(uint32_t, char*, size_t)>(h, "rsmi_dev_name_get");
  const auto busy = sym<int (*)(uint32_t, uint32_t*)>(h, "rsmi_dev_busy_percent_get");
  const auto used = sym<int (*)(uint32_t, int, uint64_t*)>(h, "rsmi_dev_memory_usage_get");
  const auto total = sym<int (*)(uint32_t, int, uint64_t*)>(h, "rsmi_dev_memory_total_get");
  const auto power = sym<int (*)(uint32_t, uint32_t, uint64_t*)>(h, "rsmi_dev_power_ave_get");
  const auto temperature = sym<int (*)(uint32_t, uint32_t, int, int64_t*)>(h, "rsmi_dev_temp_metric_get");
  if (const auto version = sym<int (*)(int, char*, uint32_t)>(h, "rsmi_version_str_get")) {
    char text[96] = {};
    if (version(0, text, sizeof text) == 0) s.driver_version = text;  // RSMI_SW_COMP_DRIVER
  }
  uint32_t n = 0;
  if (count(&n) != 0) return s;
  for (uint32_t i = 0; i < n; ++i) {
    GpuReading r;
    r.index = static_cast<int>(i);
    char dn[96] = {};
    if (name && name(i, dn, sizeof dn) == 0) r.name = dn;
    uint32_t b = 0;
    if (busy && busy(i, &b) == 0) r.utilization_pct = b;
    uint64_t v = 0;
    if (used && used(i, 0, &v) == 0) r.memory_used_bytes = static_cast<double>(v);  // RSMI_MEM_TYPE_VRAM
    if (total && total(i, 0, &v) == 0) r.memory_total_bytes = static_cast<double>(v);
    if (power && power(i, 0, &v) == 0) r.power_w = static_cast<double>(v) / 1e6;  // microwatts
    int64_t t = 0;
    if (temperature && temperature(i, 0, 0, &t) == 0) r.temperature_c = static_cast<double>(t) / 1000.0;  // edge, current, millidegrees
    s.devices.push_back(r);
  }
  return s;
}

namespace {
double wall_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Seconds since this process started: /proc/self/stat's start time (field 22, clock ticks after
// boot) against /proc/uptime. 0 when /proc is not there.
double process_age_seconds() {
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string text;
  double up = 0;
  if (!std::getline(stat, text) || !(uptime >> up)) return 0;
  const size_t paren = text.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return 0;
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return std::max(0.0, up - std::stod(field) / static_cast<double>(sysconf(_SC_CLK_TCK)));
  }
  return 0;
}
}  // namespace

HostReading host() {
  HostReading r;
  r.cores = static_cast<int>(std::thread::hardware_concurrency());
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (statm >> size >> resident) r.rss_bytes = resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  // CPU time of the process over wall time since the previous call (the first: since start-up).
  static std::mutex mutex;
  static double last_cpu = 0, last_wall = -1;
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  const double cpu = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  const double wall = wall_seconds();
  std::lock_guard lock(mutex);
  const double since = last_wall < 0 ? process_age_seconds() : wall - last_wall;
  if (since > 0) r.cpu_utilization_pct = 100.0 * (cpu - last_cpu) / since;
  last_cpu = cpu, last_wall = wall;
  return r;
}

}  // namespace tessera::telemetry
