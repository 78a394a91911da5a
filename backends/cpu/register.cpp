// Registers the CPU backend: allocator, device facts, and the kernel table.
#include <tbb/info.h>
#include <tbb/version.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "cpu_backend.h"
#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "tessera/backend/registry.h"
#include "tessera/runtime.h"

#if defined(TESSERA_CPU_HAS_AVX512_VARIANT)
namespace tessera::cpu::avx512 {
void register_kernels(KernelTable& table);
const char* simd_path();
}  // namespace tessera::cpu::avx512
#endif

namespace tessera {
namespace cpu {
namespace {

class HostMemory final : public RawAllocator {
 public:
  void* raw_alloc(size_t nbytes) override { return std::aligned_alloc(64, (nbytes + 63) / 64 * 64); }
  void raw_free(void* ptr) override { std::free(ptr); }
  bool host_accessible() const override { return true; }
};

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

std::string cpu_feature_list() {
  std::string f;
  auto add = [&f](bool on, const char* name) {
    if (on) f += (f.empty() ? "" : " ") + std::string(name);
  };
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  add(__builtin_cpu_supports("sse4.2"), "sse4.2");
  add(__builtin_cpu_supports("avx"), "avx");
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  const CpuFeatures& cf = cpu_features();
  add(cf.f16c, "f16c");
  add(cf.avx512f, "avx512f");
  add(cf.avx512bw, "avx512bw");
  add(cf.avx512vl, "avx512vl");
  add(cf.avx512dq, "avx512dq");
  add(cf.avx512bf16, "avx512_bf16");
  add(cf.avx512fp16, "avx512_fp16");
#elif defined(__aarch64__)
  add(true, "neon");
#endif
  return f.empty() ? "none detected" : f;
}

// Which bf16 x bf16 GEMM runs, and why not AMX where it is not.
std::string bf16_gemm_variant() {
  switch (amx::mode()) {
    case amx::Mode::hardware:
      return "amx (tdpbf16ps tiles)";
    case amx::Mode::emulated:
      return "amx tile program on the software tile unit (TESSERA_CPU_AMX=emulate)";
    case amx::Mode::off:
      break;
  }
  std::string why = amx::unavailable_reason();
  if (why.empty()) why = "turned off by TESSERA_CPU_ISA or TESSERA_CPU_AMX";
  return (bf16::available() ? "avx512_bf16 (vdpbf16ps)" : "f32 FMA on widened bf16") + std::string("; no AMX: ") + why;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() : allocator_("cpu:0", memory_) {
    if (const char* g = std::getenv("TESSERA_ALLOC_GUARD"); g && std::strcmp(g, "0") != 0) allocator_.set_guards(true);
    // One kernel set for the process, chosen once: every kernel then agrees on the ISA.
    isa_ = select_isa();
    (void)amx::mode();  // a TESSERA_CPU_AMX / TESSERA_CPU_ISA=amx the machine cannot honour throws here
#if defined(TESSERA_CPU_HAS_AVX512_VARIANT)
    if (isa_ == Isa::avx512) {
      avx512::register_kernels(kernels_);
      simd_ = avx512::simd_path();
      return;
    }
#endif
    base::register_kernels(kernels_);
    simd_ = base::simd_path();
  }
  const char* name() const override { return "cpu"; }
  DeviceType device_type() const override { return DeviceType::cpu; }
  int device_count() const override { return 1; }
  DeviceInfo device_info(int) const override {
    DeviceInfo info;
    info.name = cpu_model_name();
    info.total_memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
    info.compute_units = tbb::info::default_concurrency();
    info.properties = {
        {"cpu family", cpu_family()},
        {"simd (cpu)", cpu_feature_list()},
        {"simd (kernels)", simd_},
        {"kernel ISA", isa_name(isa_) + (std::getenv("TESSERA_CPU_ISA") ? " (TESSERA_CPU_ISA)" : " (cpuid)") +
                           (has_avx512_variant() ? "; built: " + isa_name(Isa::base) + ", avx512" : "; built: " + isa_name(Isa::base))},
        {"bf16 GEMM", bf16_gemm_variant()},
        {"threads", std::to_string(num_threads())}};
    return info;
  }
  std::vector<std::pair<std::string, std::string>> build_info() const override {
    return {{"oneTBB", std::to_string(TBB_VERSION_MAJOR) + "." + std::to_string(TBB_VERSION_MINOR)},
            {"kernels", std::to_string(kernels_.count()) + "/" + std::to_string(kOpCount) + " ops"}};
  }
  CachingAllocator& allocator(int) override { return allocator_; }
  bool host_accessible() const override { return true; }
  void copy_from_host(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void copy_to_host(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void copy_on_device(void* dst, int, const void* src, int, size_t n) override { std::memcpy(dst, src, n); }
  void synchronize(int) override {}

 private:
  HostMemory memory_;
  CachingAllocator allocator_;
  Isa isa_ = Isa::base;
  const char* simd_ = "";
};

}  // namespace
}  // namespace cpu

void register_cpu_backend() { register_backend(std::make_unique<cpu::CpuBackend>()); }

}  // namespace tessera
