#pragma once
// Square in-register transposes for the GEMM's packing (gemm.cpp): a packed panel stores one
// K step's MR (A) or NR (B) values side by side, so an operand whose contiguous direction is K
// (a row-major A, a transposed B such as a weight read as w^T or a Winograd gradient tile)
// must be transposed into it. Element by element that is one scalar store per value, as costly
// as the multiplies on the small GEMMs of a Winograd weight gradient; a W x W block through
// registers is W loads, a few shuffles per value and W stores.
//
// transpose_block(src, ss, rows, dst, ds, cols): reads `rows` (<= W) rows of W contiguous floats
// at src + i * ss (rows past `rows` read as zero) and writes the transpose: dst + j * ds gets
// element j of every row, as its first `cols` (<= W) floats.
#include <cstdint>

#if defined(TESSERA_CPU_AVX512) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "isa.h"

TESSERA_CPU_KERNELS_BEGIN

#if defined(TESSERA_CPU_AVX512)
inline constexpr int kTransposeWidth = 16;

TESSERA_INTRINSICS_BEGIN
inline void transpose_block(const float* src, int64_t ss, int rows, float* dst, int64_t ds, int cols) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_loadu_ps(src + i * ss) : _mm512_setzero_ps();
  // Pairs of rows interleaved, then pairs of pairs: each 128-bit lane holds a 4 x 4 transpose.
  for (int i = 0; i < 16; i += 2) t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44), r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44), r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  // Then the 4 x 4 grid of 128-bit lanes is transposed in two rounds of lane shuffles.
  for (int h = 0; h < 16; h += 8) {
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88), t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xDD);
    }
  }
  for (int i = 0; i < 8; ++i) r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88), r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
  const __mmask16 keep = static_cast<__mmask16>((1u << cols) - 1);
  for (int j = 0; j < 16; ++j) _mm512_mask_storeu_ps(dst + j * ds, keep, r[j]);
}
TESSERA_INTRINSICS_END
#elif defined(__AVX2__)
inline constexpr int kTransposeWidth = 8;

inline void transpose_block(const float* src, int64_t ss, int rows, float* dst, int64_t ds, int cols) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = i < rows ? _mm256_loadu_ps(src + i * ss) : _mm256_setzero_ps();
  for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44), r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44), r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20), t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
  if (cols == 8) {
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + j * ds, t[j]);
    return;
  }
  alignas(32) static constexpr int32_t kLanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  const __m256i keep = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLanes + 8 - cols));
  for (int j = 0; j < 8; ++j) _mm256_maskstore_ps(dst + j * ds, keep, t[j]);
}
#else
inline constexpr int kTransposeWidth = 8;

inline void transpose_block(const float* src, int64_t ss, int rows, float* dst, int64_t ds, int cols) {
  for (int j = 0; j < kTransposeWidth; ++j) {
    for (int i = 0; i < cols; ++i) dst[j * ds + i] = i < rows ? src[i * ss + j] : 0.0f;
  }
}
#endif

TESSERA_CPU_KERNELS_END
