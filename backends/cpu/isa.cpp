// CPU feature detection and the choice of kernel set (isa.h). Built with the core's flags: it
// runs before anything knows which ISA the CPU has.
#include "isa.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "gemm_bf16.h"
#include "tessera/error.h"

#ifndef TESSERA_CPU_BASELINE_NAME
#define TESSERA_CPU_BASELINE_NAME "generic"
#endif

namespace tessera::cpu {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  const bool fma = c & (1u << 12), f16c = c & (1u << 29);
  // The OS must save the YMM (XCR0 bits 1-2) and ZMM/opmask (bits 5-7) state on a context
  // switch, or the instructions fault even though cpuid lists them.
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  const bool ymm_os = (xcr0 & 0x6) == 0x6, zmm_os = (xcr0 & 0xe6) == 0xe6;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = ymm_os && (b & (1u << 5));
  f.fma = ymm_os && fma;
  f.f16c = ymm_os && f16c;
  f.avx512f = zmm_os && (b & (1u << 16));
  f.avx512dq = zmm_os && (b & (1u << 17));
  f.avx512bw = zmm_os && (b & (1u << 30));
  f.avx512vl = zmm_os && (b & (1u << 31));
  f.avx512fp16 = zmm_os && (d & (1u << 23));
  __cpuid_count(7, 1, a, b, c, d);
  f.avx512bf16 = zmm_os && (a & (1u << 5));
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool has_avx512_variant() {
#if defined(TESSERA_CPU_HAS_AVX512_VARIANT)
  return true;
#else
  return false;
#endif
}

std::string isa_name(Isa isa) { return isa == Isa::avx512 ? "avx512" : TESSERA_CPU_BASELINE_NAME; }

Isa select_isa() {
  const bool can_avx512 = has_avx512_variant() && cpu_features().avx512();
  const char* env = std::getenv("TESSERA_CPU_ISA");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0) return can_avx512 ? Isa::avx512 : Isa::base;
  if (std::strcmp(env, "avx512") == 0) {
    TESSERA_CHECK(has_avx512_variant(), "TESSERA_CPU_ISA", "avx512 was asked for, but this library was built without the AVX-512 kernels "
                  "(they need GCC on x86-64)");
    TESSERA_CHECK(cpu_features().avx512(), "TESSERA_CPU_ISA", "avx512 was asked for, but this CPU lacks AVX-512 F/BW/VL/DQ");
    return Isa::avx512;
  }
  if (std::strcmp(env, TESSERA_CPU_BASELINE_NAME) == 0 || std::strcmp(env, "avx2") == 0) {
    TESSERA_CHECK(std::strcmp(TESSERA_CPU_BASELINE_NAME, "avx2") == 0 || std::strcmp(env, "avx2") != 0, "TESSERA_CPU_ISA",
                  "avx2 was asked for, but this library's baseline kernels are ", TESSERA_CPU_BASELINE_NAME);
    return Isa::base;
  }
  throw Error(detail::concat("TESSERA_CPU_ISA: unknown value '", env, "' (expected auto, avx2 or avx512)"));
}

namespace bf16 {
bool available() {
#if defined(TESSERA_HAVE_AVX512BF16_KERNEL)
  static const bool ok = cpu_features().avx512bf16 && cpu_features().avx512bw && cpu_features().avx512vl;
  return ok;
#else
  return false;
#endif
}

#if !defined(TESSERA_HAVE_AVX512BF16_KERNEL)
void micro_kernel(int64_t, const uint32_t*, const uint16_t*, float*, int64_t, bool, uint16_t*, int64_t) {
  throw Error("matmul: the AVX512_BF16 kernel is not built into this library");
}
#endif
}  // namespace bf16

}  // namespace tessera::cpu
