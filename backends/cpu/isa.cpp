// CPU feature detection and the choice of kernel set (isa.h). Built with the core's flags: it
// runs before anything knows which ISA the CPU has.
#include "isa.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "gemm_amx.h"
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
  const bool tile_os = (xcr0 & 0x60000) == 0x60000;  // XTILECFG (17) and XTILEDATA (18)
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
  f.amx_bf16 = tile_os && (d & (1u << 22));
  f.amx_tile = tile_os && (d & (1u << 24));
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
  if (std::strcmp(env, "amx") == 0) return can_avx512 ? Isa::avx512 : Isa::base;  // amx::mode() checks the tiles
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
  throw Error(detail::concat("TESSERA_CPU_ISA: unknown value '", env, "' (expected auto, avx2, avx512 or amx)"));
}

std::string cpu_family() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return "unknown x86-64";
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  __get_cpuid(1, &a, &b, &c, &d);
  const unsigned base_family = (a >> 8) & 0xf, base_model = (a >> 4) & 0xf;
  const unsigned family = base_family == 0xf ? base_family + ((a >> 20) & 0xff) : base_family;
  const unsigned model = base_family == 0x6 || base_family == 0xf ? base_model | (((a >> 16) & 0xf) << 4) : base_model;
  std::string name;
  if (std::strcmp(vendor, "AuthenticAMD") == 0) {
    name = "AMD";
    if (family == 0x17) name += model >= 0x30 ? " Zen 2" : " Zen";
    if (family == 0x19)
      name += (model >= 0x10 && model < 0x20) || (model >= 0x60 && model < 0x80) || (model >= 0xa0 && model < 0xb0) ? " Zen 4" : " Zen 3";
    if (family == 0x1a) name += " Zen 5";
  } else if (std::strcmp(vendor, "GenuineIntel") == 0) {
    name = "Intel";
    if (family == 6) {
      switch (model) {
        case 0x55:
          name += " Skylake/Cascade Lake server";
          break;
        case 0x6a:
        case 0x6c:
          name += " Ice Lake server";
          break;
        case 0x8f:
          name += " Sapphire Rapids";
          break;
        case 0xcf:
          name += " Emerald Rapids";
          break;
        case 0xad:
        case 0xae:
          name += " Granite Rapids";
          break;
        case 0x97:
        case 0x9a:
        case 0xb7:
        case 0xba:
        case 0xbf:
          name += " Alder/Raptor Lake";
          break;
        default:
          break;
      }
    }
  } else {
    name = vendor;
  }
  char ids[48];
  std::snprintf(ids, sizeof(ids), " (family 0x%x model 0x%02x)", family, model);
  return name + ids;
#else
  return "not x86-64";
#endif
}

namespace amx {
namespace {
// Linux (5.16+) enables the 8 KiB of tile data per process on request; without it the first
// tile instruction faults.
bool request_tile_permission() {
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

std::string hardware_missing() {
#if !defined(TESSERA_HAVE_AMX_KERNEL)
  return "this library was built without the AMX kernel (it needs a compiler with -mamx-bf16)";
#else
  const CpuFeatures& f = cpu_features();
  if (!f.amx_tile || !f.amx_bf16) return "this CPU (or its OS) lacks AMX-TILE/AMX-BF16";
  if (!f.avx512bf16 || !f.avx512bw || !f.avx512vl) return "this CPU lacks AVX512_BF16, which the AMX kernel rounds with";
  static const bool granted = request_tile_permission();
  if (!granted) return "Linux refused the tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM; kernel 5.16+ needed)";
  return "";
#endif
}

Mode choose() {
  const char* emulate = std::getenv("TESSERA_CPU_AMX");
  if (emulate && std::strcmp(emulate, "emulate") == 0) return Mode::emulated;
  TESSERA_CHECK(!emulate || *emulate == '\0' || std::strcmp(emulate, "auto") == 0 || std::strcmp(emulate, "off") == 0, "TESSERA_CPU_AMX",
                "unknown value '", emulate, "' (expected auto, off or emulate)");
  if (emulate && std::strcmp(emulate, "off") == 0) return Mode::off;
  const char* isa = std::getenv("TESSERA_CPU_ISA");
  const bool demanded = isa && std::strcmp(isa, "amx") == 0;
  if (isa && *isa && !demanded && std::strcmp(isa, "auto") != 0) return Mode::off;
  const std::string missing = hardware_missing();
  TESSERA_CHECK(!demanded || missing.empty(), "TESSERA_CPU_ISA", "amx was asked for, but ", missing);
  return missing.empty() ? Mode::hardware : Mode::off;
}
}  // namespace

Mode mode() {
  static const Mode m = choose();
  return m;
}

std::string unavailable_reason() { return hardware_missing(); }
}  // namespace amx

#if !defined(TESSERA_HAVE_AMX_KERNEL)
void amx::hardware_block(const Block&) { throw Error("matmul: the AMX kernel is not built into this library"); }
#endif

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
