// The hardware AMX tile unit (gemm_amx.h). Built with -mamx-tile -mamx-bf16 and AVX512_BF16
// (for the rounding of bf16 results); only called after amx::mode() saw the CPU, the OS and
// the process permission allow it. Uses no inline or template code shared with other files
// (the program template is instantiated on a type of this file's unnamed namespace).
#include <immintrin.h>

#include "gemm_amx_program.h"

namespace tessera::cpu::amx {
namespace {

struct HardwareTiles {
  static void configure(const unsigned char* cfg) { _tile_loadconfig(cfg); }
// GCC's tile intrinsics are macros that paste their tile number into the assembly text, so
// each number is spelled out.
#define TESSERA_FOR_TILE(T, STMT) \
  if constexpr (T == 0) {         \
    STMT(0);                      \
  } else if constexpr (T == 1) {  \
    STMT(1);                      \
  } else if constexpr (T == 2) {  \
    STMT(2);                      \
  } else if constexpr (T == 3) {  \
    STMT(3);                      \
  } else if constexpr (T == 4) {  \
    STMT(4);                      \
  } else if constexpr (T == 5) {  \
    STMT(5);                      \
  } else if constexpr (T == 6) {  \
    STMT(6);                      \
  } else {                        \
    static_assert(T == 7);        \
    STMT(7);                      \
  }
  template <int T>
  static void zero() {
#define TESSERA_ZERO(t) _tile_zero(t)
    TESSERA_FOR_TILE(T, TESSERA_ZERO)
#undef TESSERA_ZERO
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
#define TESSERA_LOAD(t) _tile_loadd(t, p, stride)
    TESSERA_FOR_TILE(T, TESSERA_LOAD)
#undef TESSERA_LOAD
  }
  template <int T>
  static void store(void* p, int64_t stride) {
#define TESSERA_STORE(t) _tile_stored(t, p, stride)
    TESSERA_FOR_TILE(T, TESSERA_STORE)
#undef TESSERA_STORE
  }
#undef TESSERA_FOR_TILE
  // The four products of the program (gemm_amx_program.h).
  template <int C, int A, int B>
  static void dot() {
    if constexpr (C == 0 && A == 4 && B == 6) _tile_dpbf16ps(0, 4, 6);
    else if constexpr (C == 1 && A == 4 && B == 7) _tile_dpbf16ps(1, 4, 7);
    else if constexpr (C == 2 && A == 5 && B == 6) _tile_dpbf16ps(2, 5, 6);
    else {
      static_assert(C == 3 && A == 5 && B == 7, "a tile product the program does not use");
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  static void release() { _tile_release(); }
  // Round to nearest even, as the AVX512_BF16 micro-kernel does (vcvtneps2bf16).
  static void to_bf16(const float* src, uint16_t* dst, int64_t n) {
    const __mmask16 lo = n >= 16 ? 0xffff : static_cast<__mmask16>((1u << n) - 1);
    const __mmask16 hi = n <= 16 ? 0 : n >= 32 ? 0xffff : static_cast<__mmask16>((1u << (n - 16)) - 1);
    _mm256_mask_storeu_epi16(dst, lo, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lo, src)));
    if (hi) _mm256_mask_storeu_epi16(dst + 16, hi, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(hi, src + 16)));
  }
};

}  // namespace

void hardware_block(const Block& block) { run_block<HardwareTiles>(block); }

}  // namespace tessera::cpu::amx
