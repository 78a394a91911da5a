// Peak FLOP/s and bandwidth, so every result also reads as a fraction of what the hardware can
// do. CPU: cores x SIMD lanes x FMAs per cycle x 2 x clock, with the clock measured by a chain of
// dependent adds (one per cycle) and the FMAs per cycle of the kernel set's vector width measured
// too (Zen 4 runs one 512-bit FMA per cycle, Zen 5 and most AVX-512 Xeons two; every AVX2 core
// since Haswell two 256-bit ones); bandwidth is left to the STREAM-triad peer. GPUs: a table of
// vendor datasheet figures (dense, no sparsity), matched on the device name.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>

#include "bench.h"
#include "tessera/backend/backend.h"
#include "tessera/backend/registry.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

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

#if defined(__x86_64__) && defined(__GNUC__)
// 12 independent FMA chains (more than latency 4 x 2 pipes; 12 + 2 constants fit AVX2's 16
// registers, where 16 chains spilled and measured store forwarding), kept in registers by an
// empty asm that claims to change them (so they are neither folded nor hoisted). Returns the
// best FMA instructions per second of three runs.
#define TESSERA_FMA_THROUGHPUT(V, SET1, FMADD)                                                                      \
  const V m = SET1(0.999f), c = SET1(1e-3f);                                                                         \
  V a0 = SET1(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0, a10 = a0,      \
    a11 = a0;                                                                                                       \
  constexpr uint64_t iters = 2'000'000;                                                                             \
  double best = 0;                                                                                                  \
  for (int rep = 0; rep < 3; ++rep) {                                                                               \
    const auto t0 = std::chrono::steady_clock::now();                                                               \
    for (uint64_t i = 0; i < iters; ++i) {                                                                          \
      a0 = FMADD(a0, m, c), a1 = FMADD(a1, m, c), a2 = FMADD(a2, m, c), a3 = FMADD(a3, m, c);                       \
      a4 = FMADD(a4, m, c), a5 = FMADD(a5, m, c), a6 = FMADD(a6, m, c), a7 = FMADD(a7, m, c);                       \
      a8 = FMADD(a8, m, c), a9 = FMADD(a9, m, c), a10 = FMADD(a10, m, c), a11 = FMADD(a11, m, c);                   \
      asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));                             \
      asm volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));                           \
    }                                                                                                               \
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();                  \
    best = std::max(best, 12.0 * static_cast<double>(iters) / s);                                                   \
  }                                                                                                                 \
  return best;
__attribute__((target("avx2,fma"))) double ymm_fmas_per_second() { TESSERA_FMA_THROUGHPUT(__m256, _mm256_set1_ps, _mm256_fmadd_ps) }
__attribute__((target("avx512f"))) double zmm_fmas_per_second() { TESSERA_FMA_THROUGHPUT(__m512, _mm512_set1_ps, _mm512_fmadd_ps) }
#undef TESSERA_FMA_THROUGHPUT
#endif

// Lanes and FMAs per cycle per core of the CPU kernel set in use ("avx512" or AVX2).
std::pair<int, int> vector_lanes_and_fmas(double ghz) {
  const std::string kernels = cpu_kernel_set();
  const int lanes = kernels == "avx512" ? 16 : 8;
  int fmas = 2;
#if defined(__x86_64__) && defined(__GNUC__)
  if (ghz > 0 && (kernels == "avx512" || __builtin_cpu_supports("fma"))) {
    const double per_cycle = (kernels == "avx512" ? zmm_fmas_per_second() : ymm_fmas_per_second()) / (ghz * 1e9);
    fmas = per_cycle > 1.5 ? 2 : 1;  // whole pipes: a measured 1.8 is two pipes slowed by the timer's noise
  }
#endif
  return {lanes, fmas};
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

std::string cpu_property(const std::string& name) {
  if (const Backend* b = find_backend(DeviceType::cpu)) {
    for (const auto& [key, value] : b->device_info(0).properties) {
      if (key == name) return value;
    }
  }
  return "";
}

std::string cpu_kernel_set() { return cpu_property("simd (kernels)"); }

Peak cpu_peak(int threads) {
  const double ghz = measured_clock_ghz();
  const auto [lanes, fmas] = vector_lanes_and_fmas(ghz);
  Peak p;
  p.f32_gflops = threads * lanes * fmas * 2 * ghz;
  p.f16_gflops = p.f32_gflops;  // 16-bit types compute in f32 on the CPU
  p.source = std::to_string(threads) + " cores x " + std::to_string(lanes) + " lanes x " + std::to_string(fmas) +
             " FMA/cycle (measured) x 2 x " + std::to_string(ghz).substr(0, 4) + " GHz (measured)";
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
