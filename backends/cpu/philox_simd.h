#pragma once
// Philox4x32-10 for 8 consecutive blocks at once in AVX2 registers (core/kernels/philox.h is
// the reference: same words, bit for bit). The scalar version's 32x32->64 multiplies do not
// vectorise under GCC; here vpmuludq multiplies the even lanes and the odd lanes (shifted
// down) and the halves are blended back, so one round costs 4 multiplies for 8 blocks.
// Included inside TESSERA_CPU_KERNELS_BEGIN/END: the AVX-512 set compiles it again. The
// generic (TESSERA_CPU_ISA=generic, non-x86) build runs the scalar reference per block.
#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "tessera/kernels/philox.h"

namespace philox_simd {

constexpr int kBlocks = 8;                 ///< Philox blocks per call
constexpr int kWords = 4 * kBlocks;        ///< words (= elements) per call

#if defined(__AVX2__)
// (hi, lo) 32-bit halves of a * m for the 8 unsigned lanes of a.
inline __attribute__((always_inline)) void mul_hi_lo(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

/** Words of blocks first_block .. first_block + 7 in element order: words[4 b + j] is word j
 *  of block first_block + b (= element 4 (first_block + b) + j of the draw). */
inline void philox_blocks8(uint64_t seed, uint64_t offset, uint64_t first_block, uint32_t* words) {
  alignas(32) uint32_t lo_idx[kBlocks], hi_idx[kBlocks];
  for (int b = 0; b < kBlocks; ++b) {
    const uint64_t blk = first_block + static_cast<uint64_t>(b);
    lo_idx[b] = static_cast<uint32_t>(blk);
    hi_idx[b] = static_cast<uint32_t>(blk >> 32);
  }
  __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo_idx));
  __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi_idx));
  __m256i c2 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(offset)));
  __m256i c3 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(offset >> 32)));
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u)), m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    __m256i hi0, lo0, hi1, lo1;
    mul_hi_lo(c0, m0, hi0, lo0);
    mul_hi_lo(c2, m1, hi1, lo1);
    const __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(static_cast<int>(k0)));
    const __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(static_cast<int>(k1)));
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // 4 x 8 (word, block) -> element order: two unpack levels give each block's 4 words per
  // 128-bit lane; the lanes then hold blocks (0,4), (1,5), (2,6), (3,7).
  const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
  const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
  const __m256i b04 = _mm256_unpacklo_epi64(t0, t2), b15 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i b26 = _mm256_unpacklo_epi64(t1, t3), b37 = _mm256_unpackhi_epi64(t1, t3);
  __m256i* out = reinterpret_cast<__m256i*>(words);
  _mm256_storeu_si256(out + 0, _mm256_permute2x128_si256(b04, b15, 0x20));
  _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(b26, b37, 0x20));
  _mm256_storeu_si256(out + 2, _mm256_permute2x128_si256(b04, b15, 0x31));
  _mm256_storeu_si256(out + 3, _mm256_permute2x128_si256(b26, b37, 0x31));
}
#else
inline void philox_blocks8(uint64_t seed, uint64_t offset, uint64_t first_block, uint32_t* words) {
  for (int b = 0; b < kBlocks; ++b) {
    const tessera::kernels::Philox4 w = tessera::kernels::philox_block(seed, offset, first_block + static_cast<uint64_t>(b));
    for (int j = 0; j < 4; ++j) words[4 * b + j] = w.v[j];
  }
}
#endif

}  // namespace philox_simd
