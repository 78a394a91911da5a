#pragma once
// Run-time ISA dispatch for the CPU kernels.
//
// Every kernel translation unit is compiled once for the baseline ISA (TESSERA_CPU_ISA_FLAGS:
// AVX2+FMA+F16C, or generic) into namespace tessera::cpu::base and, when the build has the
// AVX-512 variant (GCC on x86-64), a second time into tessera::cpu::avx512 through a generated
// wrapper that defines TESSERA_CPU_AVX512 and includes the same source. The backend registers
// one of the two kernel sets at start-up, from cpuid (or TESSERA_CPU_ISA=avx2|avx512).
//
// Why a target pragma and not -mavx512f on the wrapper: inline functions and templates from
// headers (the standard library, oneTBB, core/kernels) are emitted as weak symbols in every
// object that uses them, and the linker keeps one copy. Compiled with -mavx512f, that copy
// could hold AVX-512 instructions and be the one an AVX2-only CPU runs. Under the pragma only
// the functions defined between TESSERA_CPU_KERNELS_BEGIN and _END (all in the variant's own
// namespace, so never merged with another copy) get AVX-512 code; header code stays baseline
// (and is still inlined into AVX-512 callers, whose ISA is a superset). The isa-leak test
// checks the built library: every function holding an AVX-512 instruction is in
// tessera::cpu::avx512 (or is the AVX512_BF16 micro-kernel).
//
// GCC's C++ front end lexes the file before it parses pragmas, so __AVX512F__ is not defined
// inside the region: variant code tests TESSERA_CPU_AVX512 instead.
#include <string>

#if defined(TESSERA_CPU_AVX512)
#define TESSERA_CPU_KERNELS_BEGIN                                                                         \
  _Pragma("GCC push_options")                                                                             \
  _Pragma("GCC target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512\")") \
  namespace tessera::cpu::avx512 {
#define TESSERA_CPU_KERNELS_END \
  }                             \
  _Pragma("GCC pop_options")
#else
#define TESSERA_CPU_KERNELS_BEGIN namespace tessera::cpu::base {
#define TESSERA_CPU_KERNELS_END }
#endif

// Around code written in AVX-512 intrinsics: GCC 12's _mm512_unpacklo_ps, _mm512_max_ps,
// _mm512_cvtepi32_epi64 and others pass _mm512_undefined_*() as the unused merge source, which
// -W(maybe-)uninitialized reports from inside its own header once inlined (-Werror): a false
// positive, silenced for the functions between these two markers only.
#define TESSERA_INTRINSICS_BEGIN                          \
  _Pragma("GCC diagnostic push")                          \
  _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
  _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define TESSERA_INTRINSICS_END _Pragma("GCC diagnostic pop")

namespace tessera::cpu {

/** The kernel sets a CPU build can carry. */
enum class Isa { base, avx512 };

/** What cpuid says about the running CPU (x86-64; all false elsewhere). */
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512bf16 = false, avx512fp16 = false;
  bool amx_tile = false, amx_bf16 = false;  // cpuid and XCR0 (the permission is amx::mode()'s)
  bool avx512() const { return avx512f && avx512bw && avx512vl && avx512dq; }
};
const CpuFeatures& cpu_features();

/** Whether this library carries the AVX-512 kernel set. */
bool has_avx512_variant();

/**
 * The kernel set to run: TESSERA_CPU_ISA (avx2|avx512, or auto/unset) if set, else AVX-512 when
 * the CPU and the build have it. An override the CPU or the build cannot honour throws.
 */
Isa select_isa();

/** The CPU's vendor and microarchitecture family from cpuid ("AMD Zen 3 (family 0x19 model
 *  0x01)", "Intel Sapphire Rapids (family 6 model 0x8f)"), for `tessera info` and bench records. */
std::string cpu_family();

/** "avx512" or the baseline's name ("avx2" or "generic"), as `tessera info` prints it. */
std::string isa_name(Isa isa);

}  // namespace tessera::cpu
