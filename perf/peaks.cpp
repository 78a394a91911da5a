// Peak FLOP/s and bandwidth, so every result also reads as a fraction of what the hardware can
// do. CPU: cores x SIMD lanes x FMA units x 2 x clock, with the clock measured by a chain of
// dependent adds (one per cycle); bandwidth is left to the STREAM-triad peer. GPUs: a table of
// vendor datasheet figures (dense, no sparsity), matched on the device name.
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

#include "bench.h"
#include "tessera/backend/backend.h"
#include "tessera/backend/registry.h"

namespace tessera::bench {
namespace {

double measured_clock_ghz() {
#if defined(__x86_64__)
  uint64_t x = 0;
  const uint64_t y = 1, iters = 20'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < iters; ++i) {
      // 10 dependent single-cycle adds per iteration: the loop runs at one add per cycle.
      asm volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                   "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
                   : "+r"(x)
                   : "r"(y));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 10.0 * static_cast<double>(iters) / s * 1e-9);
  }
  return best;
#else
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("cpu MHz", 0) == 0) return std::stod(line.substr(line.find(':') + 1)) / 1000.0;
  }
  return 0;
#endif
}

struct GpuPeak {
  const char* match;  // substring of the device name
  const char* label;
  double f32_tflops, f16_tflops, tbps;
};
// Datasheet figures: FP32 (non-tensor), dense FP16/BF16 tensor throughput, memory bandwidth.
constexpr GpuPeak kGpuPeaks[] = {
    {"H200", "H200 SXM", 67.0, 989.0, 4.8},      {"H100 PCIe", "H100 PCIe", 51.0, 756.0, 2.0},
    {"H100", "H100 SXM", 67.0, 989.0, 3.35},     {"A100", "A100 SXM 80GB", 19.5, 312.0, 2.04},
    {"L40S", "L40S", 91.6, 362.0, 0.864},        {"MI300X", "MI300X", 163.4, 1307.0, 5.3},
    {"MI250X", "MI250X", 47.9, 383.0, 3.2},      {"7900 XTX", "RX 7900 XTX", 61.4, 122.8, 0.96},
};
}  // namespace

Peak cpu_peak(int threads) {
  const double ghz = measured_clock_ghz();
  // AVX2: 8 f32 lanes, 2 FMA pipes (Zen 2/3/4, Haswell and later), 2 FLOPs per FMA.
  const double lanes = 8, fma_units = 2;
  Peak p;
  p.f32_gflops = threads * lanes * fma_units * 2 * ghz;
  p.f16_gflops = p.f32_gflops;  // 16-bit types compute in f32 on the CPU
  p.source = std::to_string(threads) + " cores x 8 lanes x 2 FMA x 2 x " + std::to_string(ghz).substr(0, 4) + " GHz (measured)";
  return p;
}

Peak device_peak(Device device) {
  Backend* b = find_backend(device.type);
  if (!b || b->device_count() <= device.index) return {};
  const std::string name = b->device_info(device.index).name;
  for (const auto& g : kGpuPeaks) {
    if (name.find(g.match) != std::string::npos) {
      return {std::string("table: ") + g.label, g.f32_tflops * 1e3, g.f16_tflops * 1e3, g.tbps * 1e3};
    }
  }
  return {"unknown device '" + name + "'", 0, 0, 0};
}

}  // namespace tessera::bench
