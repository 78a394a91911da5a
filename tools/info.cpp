// `tessera info` and `tessera demo`.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "commands.h"
#include "tessera/backend/modules.h"
#include "tessera/dist.h"
#include "tessera/tessera.h"
#include "tessera_build_config.h"

namespace tessera::tools {
namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

std::string opt(const std::optional<double>& v, const char* unit, int digits = 0) {
  if (!v) return "n/a";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f%s", digits, *v, unit);
  return buf;
}

void print_telemetry() {
  const telemetry::HostReading h = telemetry::host();
  std::printf("\nTelemetry:\n  host: %d cores, this process %.1f MiB resident, %.0f%% CPU since start\n", h.cores,
              static_cast<double>(h.rss_bytes) / (1 << 20), h.cpu_utilization_pct);
  for (const telemetry::GpuSource& s : {telemetry::nvml(), telemetry::rocm_smi()}) {
    if (!s.available) {
      std::printf("  %s: not loaded (%s)\n", s.name.c_str(), s.reason.c_str());
      continue;
    }
    std::printf("  %s (%s, driver %s): %zu device(s)\n", s.name.c_str(), s.library.c_str(), s.driver_version.c_str(), s.devices.size());
    for (const auto& d : s.devices) {
      std::printf("    %d %s: %s busy, memory %s of %s, %s, %s, SM clock %s, memory clock %s\n", d.index, d.name.c_str(),
                  opt(d.utilization_pct, "%").c_str(), opt(d.memory_used_bytes ? std::optional(*d.memory_used_bytes / (1 << 30)) : std::nullopt, " GiB", 1).c_str(),
                  opt(d.memory_total_bytes ? std::optional(*d.memory_total_bytes / (1 << 30)) : std::nullopt, " GiB", 1).c_str(),
                  opt(d.power_w, " W", 1).c_str(), opt(d.temperature_c, " C").c_str(), opt(d.sm_clock_mhz, " MHz").c_str(),
                  opt(d.memory_clock_mhz, " MHz").c_str());
    }
  }
}

nlohmann::json reading_json(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

nlohmann::json source_json(const telemetry::GpuSource& s) {
  nlohmann::json j = {{"name", s.name}, {"library", s.library}, {"available", s.available}, {"reason", s.reason},
                      {"driver_version", s.driver_version}, {"devices", nlohmann::json::array()}};
  for (const auto& d : s.devices) {
    j["devices"].push_back({{"index", d.index}, {"name", d.name}, {"utilization_pct", reading_json(d.utilization_pct)},
                            {"memory_used_bytes", reading_json(d.memory_used_bytes)}, {"memory_total_bytes", reading_json(d.memory_total_bytes)},
                            {"power_w", reading_json(d.power_w)}, {"temperature_c", reading_json(d.temperature_c)},
                            {"sm_clock_mhz", reading_json(d.sm_clock_mhz)}, {"memory_clock_mhz", reading_json(d.memory_clock_mhz)}});
  }
  return j;
}

// `tessera info --json`: the same facts as the text, versioned by docs/info.schema.json.
void print_info_json() {
  nlohmann::json j = {{"schema", "tessera-info/1"}, {"version", TESSERA_VERSION_STRING}, {"build_type", TESSERA_BUILD_TYPE},
                      {"compiler", TESSERA_COMPILER}, {"cpu_kernel_baseline", TESSERA_CPU_ISA}};
  j["backends"] = nlohmann::json::array();
  for (Backend* b : registered_backends()) {
    nlohmann::json bj = {{"name", b->name()}, {"build", nlohmann::json::object()}, {"devices", nlohmann::json::array()}};
    for (const auto& [k, v] : b->build_info()) bj["build"][k] = v;
    bj["gaps"] = nlohmann::json::array();
    for (const OpGap& g : op_gaps(*b)) bj["gaps"].push_back({{"op", op_name(g.op)}, {"dtypes", g.dtypes.str()}, {"why", g.why}});
    const int count = b->device_count();
    bj["unavailable_reason"] = count == 0 ? nlohmann::json(b->unavailable_reason()) : nlohmann::json(nullptr);
    for (int i = 0; i < count; ++i) {
      const DeviceInfo info = b->device_info(i);
      nlohmann::json dj = {{"device", Device(b->device_type(), i).str()}, {"name", info.name}, {"memory_bytes", info.total_memory},
                           {"compute_units", info.compute_units}, {"properties", nlohmann::json::object()}};
      for (const auto& [k, v] : info.properties) dj["properties"][k] = v;
      bj["devices"].push_back(dj);
    }
    j["backends"].push_back(bj);
  }
  j["missing_backends"] = nlohmann::json::array();
  for (const auto& m : missing_backends()) j["missing_backends"].push_back({{"name", m.name}, {"reason", m.reason}});
  j["process_groups"] = dist::available_backends();
  j["modules"] = nlohmann::json::array();
  for (const auto& m : modules::status()) {
    j["modules"].push_back({{"name", m.name}, {"path", m.path}, {"loaded", m.loaded}, {"reason", m.loaded ? nlohmann::json(nullptr) : nlohmann::json(m.reason)}});
  }
  const telemetry::HostReading h = telemetry::host();
  j["telemetry"] = {{"host", {{"cores", h.cores}, {"rss_bytes", h.rss_bytes}, {"cpu_utilization_pct", h.cpu_utilization_pct}}},
                    {"gpu", nlohmann::json::array({source_json(telemetry::nvml()), source_json(telemetry::rocm_smi())})}};
  std::cout << j.dump(2) << "\n";
}

void print_info() {
  std::cout << "Tessera " << TESSERA_VERSION_STRING << " (" << TESSERA_BUILD_TYPE << ", " << TESSERA_COMPILER
            << ", CPU kernels: " << TESSERA_CPU_ISA << ")\n\nBackends compiled in:\n";
  for (Backend* b : registered_backends()) {
    std::cout << "  " << b->name();
    for (const auto& [k, v] : b->build_info()) std::cout << "  [" << k << ": " << v << "]";
    std::cout << "\n";
    const std::vector<OpGap> gaps = op_gaps(*b);
    if (gaps.empty()) std::cout << "    gaps: none (every op at every dtype it takes)\n";
    for (const OpGap& g : gaps) std::cout << "    gap: " << op_name(g.op) << " at " << g.dtypes.str() << " (" << g.why << ")\n";
    const int count = b->device_count();
    if (count == 0) std::cout << "    no device: " << b->unavailable_reason() << "\n";
    for (int i = 0; i < count; ++i) {
      const DeviceInfo info = b->device_info(i);
      std::cout << "    " << Device(b->device_type(), i).str() << "  " << info.name << "\n"
                << "      memory " << gib(info.total_memory) << ", compute units " << info.compute_units << "\n";
      for (const auto& [k, v] : info.properties) std::cout << "      " << k << ": " << v << "\n";
    }
  }
  const auto missing = missing_backends();
  if (!missing.empty()) {
    std::cout << "\nBackends not built:\n";
    for (const auto& m : missing) std::cout << "  " << m.name << ": " << m.reason << "\n";
  }
  const auto groups = dist::available_backends();
  std::cout << "\nProcess groups (tessera::dist, data parallelism):";
  for (const auto& g : groups) std::cout << " " << g;
  if (groups.empty()) std::cout << " none: " << dist::unavailable_reason("mpi");
  std::cout << "\n";
  for (const char* name : {"nccl", "rccl"}) {
    const std::string reason = dist::unavailable_reason(name);
    if (!reason.empty()) std::cout << "  " << name << ": " << reason << "\n";
  }
  if (modules::enabled()) {
    std::cout << "\nModules (searched in";
    for (const auto& dir : modules::search_path()) std::cout << " " << dir;
    std::cout << "):\n";
    for (const auto& m : modules::status()) {
      std::cout << "  module " << m.name << ": " << (m.loaded ? "loaded from " + m.path : "not loaded: " + m.reason) << "\n";
    }
  }
#ifdef TESSERA_HAS_ONNX
  std::cout << "\nONNX: import (tessera onnx test|run) and export (train --export), opset 17\n";
#else
  std::cout << "\nONNX: off (libonnx-dev not found at configure time, or TESSERA_WITH_ONNX=OFF)\n";
#endif
  std::cout.flush();
  print_telemetry();
}

// docs/determinism.md's table: per op and compiled-in backend, "yes" (the same bits on every
// run, thread count and schedule), a note number where deterministic mode switches kernels, or
// "-" where the backend lacks the op.
void print_determinism() {
  const auto backends = registered_backends();
  std::cout << "| op |";
  for (Backend* b : backends) std::cout << " " << b->name() << " |";
  std::cout << "\n|---|";
  for (size_t i = 0; i < backends.size(); ++i) std::cout << "---|";
  std::cout << "\n";
  std::vector<std::string> notes;
  for (int i = 0; i < kOpCount; ++i) {
    const auto op = static_cast<OpId>(i);
    std::cout << "| " << op_name(op) << " |";
    for (Backend* b : backends) {
      std::string cell = b->kernels()[op] ? "yes" : "-";
      for (const NondeterministicOp& n : b->nondeterministic_ops()) {
        if (n.op != op) continue;
        notes.push_back(std::string(b->name()) + " " + std::string(op_name(op)) + ": " + n.cause + "; in deterministic mode, " +
                        n.deterministic_mode + ".");
        cell = "no (" + std::to_string(notes.size()) + ")";
      }
      std::cout << " " << cell << " |";
    }
    std::cout << "\n";
  }
  if (!notes.empty()) std::cout << "\n";
  for (size_t i = 0; i < notes.size(); ++i) std::cout << "(" << i + 1 << ") " << notes[i] << "\n";
}

void run_demo(const std::string& device_name) {
  const Device dev = Device::parse(device_name);
  manual_seed(0);
  const Tensor a = arange(0.0, 6.0, 1.0, DType::f32, dev).reshape({2, 3});
  const Tensor b = randn({3, 2}, DType::f32, dev);
  std::cout << "a = arange(6).reshape(2, 3)\n" << a << "\n\n";
  std::cout << "b = randn(3, 2) with seed 0\n" << b << "\n\n";
  std::cout << "a @ b\n" << matmul(a, b) << "\n\n";
  std::cout << "softmax(a, -1)\n" << softmax(a, -1) << "\n\n";
  std::cout << "a.sum(axis 0) = " << sum(a, {0}) << ", mean = " << mean(a).item<float>() << "\n";
  std::cout << "a.t() (a view, no copy) is_contiguous = " << std::boolalpha << a.mT().is_contiguous() << "\n\n";

  // A GEMM large enough to say something about the CPU kernels.
  const int64_t n = 512;
  const Tensor x = randn({n, n}, DType::f32, dev), y = randn({n, n}, DType::f32, dev);
  (void)matmul(x, y);
  const auto t0 = std::chrono::steady_clock::now();
  const int reps = 10;
  for (int i = 0; i < reps; ++i) (void)matmul(x, y);
  synchronize(dev);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  std::printf("matmul %lldx%lld f32 on %s: %.2f ms, %.1f GFLOP/s\n", static_cast<long long>(n),
              static_cast<long long>(n), dev.str().c_str(), s * 1e3, 2.0 * n * n * n / s * 1e-9);
}
}  // namespace

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show the backends compiled in and their devices");
  static bool determinism = false, json = false;
  cmd->add_flag("--determinism", determinism, "Print the per-op, per-backend determinism table (docs/determinism.md)");
  cmd->add_flag("--json", json, "Print the same facts as JSON (schema: docs/info.schema.json)");
  cmd->callback([] { determinism ? print_determinism() : json ? print_info_json() : print_info(); });
}

void add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "A short tour of the tensor API");
  static std::string device = "cpu";
  cmd->add_option("--device", device, "Device to run on (cpu, cuda:0, ...)");
  cmd->callback([] { run_demo(device); });
}

}  // namespace tessera::tools
