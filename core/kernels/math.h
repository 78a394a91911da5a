#pragma once
// Scalar math overloads usable from host and device code. Only float and double are
// meaningful here: the 16-bit types are computed in float (see compute_t in half.h).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "macros.h"

namespace tessera::kmath {

#define TESSERA_KMATH_FN(name, ffn, dfn)                          \
  TESSERA_HD_INLINE float name(float x) { return ::ffn(x); }    \
  TESSERA_HD_INLINE double name(double x) { return ::dfn(x); }

TESSERA_KMATH_FN(exp, expf, exp)
TESSERA_KMATH_FN(expm1, expm1f, expm1)
TESSERA_KMATH_FN(log, logf, log)
TESSERA_KMATH_FN(log1p, log1pf, log1p)
TESSERA_KMATH_FN(sqrt, sqrtf, sqrt)
TESSERA_KMATH_FN(sin, sinf, sin)
TESSERA_KMATH_FN(cos, cosf, cos)
TESSERA_KMATH_FN(tanh, tanhf, tanh)
TESSERA_KMATH_FN(erf, erff, erf)
TESSERA_KMATH_FN(floor, floorf, floor)
TESSERA_KMATH_FN(ceil, ceilf, ceil)
TESSERA_KMATH_FN(nearbyint, nearbyintf, nearbyint)
TESSERA_KMATH_FN(fabs, fabsf, fabs)
TESSERA_KMATH_FN(trunc, truncf, trunc)
TESSERA_KMATH_FN(tan, tanf, tan)
TESSERA_KMATH_FN(asin, asinf, asin)
TESSERA_KMATH_FN(acos, acosf, acos)
TESSERA_KMATH_FN(atan, atanf, atan)
TESSERA_KMATH_FN(log2, log2f, log2)
TESSERA_KMATH_FN(exp2, exp2f, exp2)
TESSERA_KMATH_FN(log10, log10f, log10)
TESSERA_KMATH_FN(sinh, sinhf, sinh)
TESSERA_KMATH_FN(cosh, coshf, cosh)
TESSERA_KMATH_FN(asinh, asinhf, asinh)
TESSERA_KMATH_FN(acosh, acoshf, acosh)
TESSERA_KMATH_FN(atanh, atanhf, atanh)
#undef TESSERA_KMATH_FN

TESSERA_HD_INLINE float pow(float a, float b) { return ::powf(a, b); }
TESSERA_HD_INLINE double pow(double a, double b) { return ::pow(a, b); }
TESSERA_HD_INLINE float fmod(float a, float b) { return ::fmodf(a, b); }
TESSERA_HD_INLINE double fmod(double a, double b) { return ::fmod(a, b); }
TESSERA_HD_INLINE float atan2(float a, float b) { return ::atan2f(a, b); }
TESSERA_HD_INLINE double atan2(double a, double b) { return ::atan2(a, b); }

// A product and a sum that are never fused into an FMA. nvcc and hipcc contract a * b + c by
// default, and may contract the same expression differently in two kernels that inline it: on an
// H200 the multi-tensor and the per-parameter Adam kernels rounded differently. Steps that must
// agree bit for bit across kernels (the optimizers) spell their arithmetic with these. The host
// compilers here do not contract in ISO C++ mode, so plain operators round the same way.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
TESSERA_HD_INLINE float mul_rn(float a, float b) { return __fmul_rn(a, b); }
TESSERA_HD_INLINE double mul_rn(double a, double b) { return __dmul_rn(a, b); }
TESSERA_HD_INLINE float add_rn(float a, float b) { return __fadd_rn(a, b); }
TESSERA_HD_INLINE double add_rn(double a, double b) { return __dadd_rn(a, b); }
#else
template <class T> TESSERA_HD_INLINE T mul_rn(T a, T b) { return a * b; }
template <class T> TESSERA_HD_INLINE T add_rn(T a, T b) { return a + b; }
#endif

template <class T> TESSERA_HD_INLINE bool isnan(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return x != x;
  } else {
    return false;
  }
}

}  // namespace tessera::kmath

namespace tessera::kernels {
// Integer arithmetic wraps around (two's complement), as in PyTorch and NumPy. For int32 and
// int64 the sum, difference or product is taken in the unsigned type, where wrapping is defined;
// signed overflow would be undefined behaviour (and UBSan rejects it). Narrower types are
// promoted to int, where they cannot overflow, and converted back modulo 2^n.
template <class T> inline constexpr bool kWrapsViaUnsigned = std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) >= sizeof(int);
template <class T, bool = kWrapsViaUnsigned<T>> struct WrapType { using type = T; };
template <class T> struct WrapType<T, true> { using type = std::make_unsigned_t<T>; };
template <class T> using wrap_t = typename WrapType<T>::type;
}  // namespace tessera::kernels
