// `tessera info` and `tessera demo`.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <utility>

#include "commands.h"
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

void print_info() {
  std::cout << "Tessera " << TESSERA_VERSION_STRING << " (" << TESSERA_BUILD_TYPE << ", " << TESSERA_COMPILER
            << ", CPU kernels: " << TESSERA_CPU_ISA << ")\n\nBackends compiled in:\n";
  for (Backend* b : registered_backends()) {
    std::cout << "  " << b->name();
    for (const auto& [k, v] : b->build_info()) std::cout << "  [" << k << ": " << v << "]";
    std::cout << "\n";
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
  if (groups.empty()) std::cout << " none: " << TESSERA_MPI_MISSING_REASON;
  std::cout << "\n";
  for (const auto& [name, reason] : {std::pair{"nccl", TESSERA_NCCL_MISSING_REASON}, std::pair{"rccl", TESSERA_RCCL_MISSING_REASON}}) {
    if (*reason) std::cout << "  " << name << ": " << reason << "\n";
  }
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
  cmd->callback([] { print_info(); });
}

void add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "A short tour of the tensor API");
  static std::string device = "cpu";
  cmd->add_option("--device", device, "Device to run on (cpu, cuda:0, ...)");
  cmd->callback([] { run_demo(device); });
}

}  // namespace tessera::tools
