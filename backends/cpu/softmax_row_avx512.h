#pragma once
// softmax of one contiguous f32 row in AVX-512 intrinsics (the AVX-512 kernel set only). The
// same operations in the same order as the portable path of softmax.cpp (vmath::exp_nonpos,
// lane_sum's 16 double lanes and its pairwise combine), so both kernel sets give identical
// bits; what changes is the instruction count and the memory overlap:
//  - 2^n by vscalefps from the float n the reduction already has (one instruction for an
//    integer add, a shift and a multiply; exact, as y * 2^n is one rounding either way);
//  - the double sum of exp taken in the exp pass from registers (no second pass over the row);
//  - the next row's input prefetched during the exp pass: softmax over a large tensor is as
//    much compute as memory traffic, and without it a row's loads waited in the max pass
//    while the memory sat idle through the previous row's arithmetic (16384 x 1024: 2.5 ms
//    against 2.65 ms without; prefetching the output's lines for writing as well: 2.65 ms).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "isa.h"

TESSERA_CPU_KERNELS_BEGIN

namespace softmax_avx512 {

TESSERA_INTRINSICS_BEGIN

// vmath::exp_reduced and exp_nonpos, one vector at a time (see vec_math.h for the constants).
[[gnu::always_inline]] inline __m512 exp_nonpos(__m512 x) {
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  const __m512 t = _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), magic);
  const __m512 n = _mm512_sub_ps(t, magic);
  const __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), x));
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  // x < -87.34 (and -inf) flush to 0; NaN fails the compare and stays NaN through y.
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654475f), _CMP_NLT_UQ);
  return _mm512_maskz_scalef_ps(keep, y, n);
}

/** Maximum as lane_max computes it (a > m ? a : m per lane, so NaNs are skipped). */
[[gnu::always_inline]] inline float row_max(const float* x, int64_t n) {
  __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) {  // max_ps(a, m) is a > m ? a : m, NaN in a keeping m
    m0 = _mm512_max_ps(_mm512_loadu_ps(x + j), m0);
    m1 = _mm512_max_ps(_mm512_loadu_ps(x + j + 16), m1);
    m2 = _mm512_max_ps(_mm512_loadu_ps(x + j + 32), m2);
    m3 = _mm512_max_ps(_mm512_loadu_ps(x + j + 48), m3);
  }
  for (; j + 16 <= n; j += 16) m0 = _mm512_max_ps(_mm512_loadu_ps(x + j), m0);
  if (j < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1);
    m1 = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail, x + j), m1);
  }
  m0 = _mm512_max_ps(m1, m0), m2 = _mm512_max_ps(m3, m2);
  return _mm512_reduce_max_ps(_mm512_max_ps(m2, m0));
}

/** out = softmax(in) over n floats given the row's maximum mx (-inf already replaced by 0);
 *  next_in is where the following row probably starts (only prefetched, never read). */
[[gnu::always_inline]] inline void row(const float* in, float* out, int64_t n, float mx, const float* next_in) {
  const __m512 vmx = _mm512_set1_ps(mx);
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();  // lane_sum's lanes 0-7 and 8-15
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(next_in + j), _MM_HINT_T0);  // one line per 16 floats
    const __m512 e = exp_nonpos(_mm512_sub_ps(_mm512_loadu_ps(in + j), vmx));
    _mm512_storeu_ps(out + j, e);
    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  if (j < n) {  // the tail lands in lanes 0 .. n - j - 1, as in lane_sum; the others add +0
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 e = _mm512_maskz_mov_ps(tail, exp_nonpos(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, in + j), vmx)));
    _mm512_mask_storeu_ps(out + j, tail, e);
    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  // lane_sum's combine: acc[l] += acc[l + w] for w = 8, 4, 2, 1.
  const __m512d s8 = _mm512_add_pd(lo, hi);
  const __m256d s4 = _mm256_add_pd(_mm512_castpd512_pd256(s8), _mm512_extractf64x4_pd(s8, 1));
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
  const double sum = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / sum));
  j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(out + j, _mm512_mul_ps(_mm512_loadu_ps(out + j), inv));
  if (j < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(out + j, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, out + j), inv));
  }
}

TESSERA_INTRINSICS_END

}  // namespace softmax_avx512

TESSERA_CPU_KERNELS_END
