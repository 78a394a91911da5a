// The AVX512_BF16 micro-kernel (gemm_bf16.h). Built with -mavx512bf16 and friends; only called
// after bf16::available() (gemm_bf16.cpp, built for the baseline ISA) said the CPU has them.
#include <immintrin.h>

#include "gemm_bf16.h"

namespace tessera::cpu::bf16 {

// 24 named accumulators (12 rows x 2 vectors of 16 columns) + 2 B vectors + 1 broadcast: 27 of
// the 32 ZMM registers, written out so they never spill.
void micro_kernel(int64_t kpairs, const uint32_t* a, const uint16_t* b, float* c, int64_t ldc, bool accumulate, uint16_t* out,
                  int64_t ldo) {
#define TESSERA_ZERO(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps();
  TESSERA_ZERO(0) TESSERA_ZERO(1) TESSERA_ZERO(2) TESSERA_ZERO(3) TESSERA_ZERO(4) TESSERA_ZERO(5)
  TESSERA_ZERO(6) TESSERA_ZERO(7) TESSERA_ZERO(8) TESSERA_ZERO(9) TESSERA_ZERO(10) TESSERA_ZERO(11)
#undef TESSERA_ZERO
  for (int64_t p = 0; p < kpairs; ++p, a += kMR, b += 2 * kNR) {
    const __m512 b0 = _mm512_castsi512_ps(_mm512_loadu_si512(b)), b1 = _mm512_castsi512_ps(_mm512_loadu_si512(b + kNR));
// A's pair is broadcast by the load unit ({1to16} embedded broadcast) inside each vdpbf16ps, so
// no shuffle micro-op competes with the dot products (compilers do not fold a broadcast that
// feeds two instructions, hence the asm). The sum of pair products is symmetric in its operands.
#define TESSERA_DOT(r)                                                                              \
  asm("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(c##r##0) : "v"(b0), "m"(a[r]));                      \
  asm("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(c##r##1) : "v"(b1), "m"(a[r]));
    TESSERA_DOT(0) TESSERA_DOT(1) TESSERA_DOT(2) TESSERA_DOT(3) TESSERA_DOT(4) TESSERA_DOT(5)
    TESSERA_DOT(6) TESSERA_DOT(7) TESSERA_DOT(8) TESSERA_DOT(9) TESSERA_DOT(10) TESSERA_DOT(11)
#undef TESSERA_DOT
  }
#define TESSERA_STORE(r)                                                                              \
  {                                                                                                   \
    float* row = c + r * ldc;                                                                         \
    if (accumulate) {                                                                                 \
      c##r##0 = _mm512_add_ps(c##r##0, _mm512_loadu_ps(row));                                         \
      c##r##1 = _mm512_add_ps(c##r##1, _mm512_loadu_ps(row + 16));                                    \
    }                                                                                                 \
    if (out) {                                                                                        \
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * ldo), (__m256i)_mm512_cvtneps_pbh(c##r##0));      \
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * ldo + 16), (__m256i)_mm512_cvtneps_pbh(c##r##1)); \
    } else {                                                                                          \
      _mm512_storeu_ps(row, c##r##0);                                                                 \
      _mm512_storeu_ps(row + 16, c##r##1);                                                            \
    }                                                                                                 \
  }
  TESSERA_STORE(0) TESSERA_STORE(1) TESSERA_STORE(2) TESSERA_STORE(3) TESSERA_STORE(4) TESSERA_STORE(5)
  TESSERA_STORE(6) TESSERA_STORE(7) TESSERA_STORE(8) TESSERA_STORE(9) TESSERA_STORE(10) TESSERA_STORE(11)
#undef TESSERA_STORE
}

}  // namespace tessera::cpu::bf16
