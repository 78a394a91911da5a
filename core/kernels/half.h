#pragma once
// Tessera's own IEEE binary16 (`Half`) and bfloat16 (`BFloat16`) storage types.
// Conversions are exact round-to-nearest-even; NaN stays NaN (quieted) and Inf stays Inf.
// NOTE: written with integer arithmetic only, so the result never depends on the FPU's
// rounding mode, flush-to-zero flags or fast-math options of whichever compiler builds it.
#include <cstdint>
#include <cstring>

#include "macros.h"

// Host code built with F16C (the CPU kernels: their base set is AVX2 + FMA + F16C) converts
// with the hardware's vcvtps2ph/vcvtph2ps: the same bits as the integer code below (round to
// nearest even from the immediate, never MXCSR; NaN quieted with its top payload bits; FTZ
// does not apply), one instruction instead of ~20 and a loop for subnormals.
#if defined(__F16C__) && !defined(TESSERA_DEVICE_CODE)
#include <immintrin.h>
#define TESSERA_F16C_CONVERSIONS 1
#endif

namespace tessera {

namespace detail {
TESSERA_HD_INLINE uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
TESSERA_HD_INLINE float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

TESSERA_HD_INLINE uint16_t float_to_half_bits_soft(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // Inf or NaN; NaN keeps its top payload bits and is made quiet
    return static_cast<uint16_t>(sign | (ax > 0x7f800000u ? (0x7e00u | ((ax >> 13) & 0x3ffu)) : 0x7c00u));
  }
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to Inf
  const uint32_t e = ax >> 23;
  if (e < 113) {  // half subnormal (or zero): units of 2^-24
    if (e == 0) return static_cast<uint16_t>(sign);  // float subnormals are far below 2^-25
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;
    if (shift >= 25) return static_cast<uint16_t>(sign);
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = ((e - 112) << 10) | ((ax >> 13) & 0x3ffu);
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry may roll into the exponent
  return static_cast<uint16_t>(sign | h);
}

TESSERA_HD_INLINE float half_bits_to_float_soft(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return bits_float(sign | 0x7f800000u | (m != 0 ? 0x400000u | (m << 13) : 0u));  // NaN quieted
  if (e == 0) {
    if (m == 0) return bits_float(sign);
    e = 113;  // normalise the subnormal
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --e;
    }
    return bits_float(sign | (e << 23) | ((m & 0x3ffu) << 13));
  }
  return bits_float(sign | ((e + 112) << 23) | (m << 13));
}

TESSERA_HD_INLINE uint16_t float_to_half_bits(float f) {
#if defined(TESSERA_F16C_CONVERSIONS)
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#else
  return float_to_half_bits_soft(f);
#endif
}

TESSERA_HD_INLINE float half_bits_to_float(uint16_t h) {
#if defined(TESSERA_F16C_CONVERSIONS)
  return _cvtsh_ss(h);
#else
  return half_bits_to_float_soft(h);
#endif
}

// double -> float rounded to odd: an inexact result gets its last mantissa bit set. Rounding
// that float once more to a format with at least 2 fewer bits (f16, bf16) then gives the
// correctly rounded result; plain RNE twice would not (1 + 2^-11 + 2^-40 is the classic case).
TESSERA_HD_INLINE float double_to_float_round_odd(double d) {
  const float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || d != d) return f;
  uint32_t u = float_bits(f);
  if ((u & 1u) == 0) {
    const bool away_from_zero = (f > 0) == (static_cast<double>(f) > d);  // |f| > |d|
    u = away_from_zero ? u - 1 : u + 1;
  }
  return bits_float(u);
}

TESSERA_HD_INLINE uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
TESSERA_HD_INLINE float bf16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }
}  // namespace detail

/** IEEE 754 binary16. Arithmetic goes through float. */
struct Half {
  uint16_t bits = 0;
  Half() = default;
  TESSERA_HD explicit Half(float f) : bits(detail::float_to_half_bits(f)) {}
  TESSERA_HD explicit Half(double d) : bits(detail::float_to_half_bits(detail::double_to_float_round_odd(d))) {}
  TESSERA_HD operator float() const { return detail::half_bits_to_float(bits); }
  TESSERA_HD static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

/** bfloat16 (the top half of an IEEE float). Arithmetic goes through float. */
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  TESSERA_HD explicit BFloat16(float f) : bits(detail::float_to_bf16_bits(f)) {}
  TESSERA_HD explicit BFloat16(double d) : bits(detail::float_to_bf16_bits(detail::double_to_float_round_odd(d))) {}
  TESSERA_HD operator float() const { return detail::bf16_bits_to_float(bits); }
  TESSERA_HD static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

/** The type arithmetic on T is carried out in: float for the 16-bit floats, T otherwise. */
template <class T> struct ComputeType { using type = T; };
template <> struct ComputeType<Half> { using type = float; };
template <> struct ComputeType<BFloat16> { using type = float; };
template <class T> using compute_t = typename ComputeType<T>::type;

}  // namespace tessera
