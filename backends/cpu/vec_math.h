#pragma once
// Single-precision exp, log, tanh, erf and the activations built on them, written without
// branches or library calls so that a loop over them vectorises: glibc's expf/logf are scalar
// calls (GCC maps them to libmvec only under -ffast-math), which held exp at 5 GB/s, a sixth of
// the memory bandwidth. Each function is a range reduction plus a polynomial (Cephes' minimax
// coefficients), with selects for the special values; loops compiled in the AVX-512 kernel set
// get 16-lane code, the AVX2 set 8 lanes (the functions are inlined into both).
//
// Accuracy against a double-precision reference, measured on every 61st float of each range by
// tests/cpu/vec_math_test.cpp (which asserts the bounds in brackets): exp 1.01 ulp (2), log
// 0.79 ulp (2), tanh 1.30 ulp (2), sigmoid 2.35 ulp (3), silu 2.22 ulp (3), erf 2.44 ulp and
// 1.4e-7 absolute (3 ulp, 2e-7), exact gelu 4e-7 absolute (1e-6). exp overflows to inf and
// underflows through the subnormals to 0 like expf; NaN in gives NaN out.
#include <bit>
#include <cstdint>

#include "tessera/kernels/activation.h"
#include "tessera/kernels/unary.h"

namespace tessera::cpu::vmath {

#define TESSERA_VMATH inline __attribute__((always_inline))

// a * b + c in one rounding where the kernels are built with FMA (both x86 kernel sets): half
// the instructions of the polynomials, and a little more accurate.
TESSERA_VMATH float fma(float a, float b, float c) {
#if defined(__FMA__)
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

/** e^r of the Cody-Waite reduction x = n ln2 + r (|r| <= ln2/2, two-part ln2) by a degree-7
 *  polynomial; sets ni = n, read from the bits of the rounding sum (no float -> int conversion,
 *  undefined for NaN or huge x; unsigned wrap-around, so any x is defined behaviour). The result
 *  is meaningful for |x| < 2^21 only: callers select their out-of-range answers afterwards. */
TESSERA_VMATH float exp_reduced(float x, int32_t& ni) {
  const float t = x * 1.44269504088896341f + 12582912.0f;  // 1.5 * 2^23: rounds to nearest
  const float n = t - 12582912.0f;
  ni = static_cast<int32_t>(std::bit_cast<uint32_t>(t) - 0x4B400000u);  // the bits of 1.5 * 2^23
  const float r = vmath::fma(n, 2.12194440e-4f, vmath::fma(n, -0.693359375f, x));
  float p = 1.9875691500e-4f;
  p = vmath::fma(p, r, 1.3981999507e-3f);
  p = vmath::fma(p, r, 8.3334519073e-3f);
  p = vmath::fma(p, r, 4.1665795894e-2f);
  p = vmath::fma(p, r, 1.6666665459e-1f);
  p = vmath::fma(p, r, 5.0000001201e-1f);
  return vmath::fma(p, r * r, r) + 1.0f;
}

/** e^x. x = n ln2 + r with |r| <= ln2/2 (Cody-Waite, two-part ln2), e^r by a degree-7
 *  polynomial, 2^n applied as two factors so subnormal results round once and n = 128 gives
 *  inf without an invalid exponent. */
TESSERA_VMATH float exp(float x) {
  // No clamps on the input: out of [-104, 89] the lanes compute garbage, and two selects on x at
  // the end give 0 and inf there (a NaN fails both tests and comes out of the polynomial). GCC
  // turned input clamps, whichever way they were written, plus a NaN select into 5 compares and
  // 9 blends spread through the computation: 44 instructions per AVX2 vector; now 30.
  int32_t ni;
  const float y = vmath::exp_reduced(x, ni);
  const int32_t n1 = ni >> 1, n2 = ni - n1;  // floor(n / 2) by a shift; in range each in [-75, 64]: normal factors
  const float s1 = std::bit_cast<float>((n1 + 127) << 23), s2 = std::bit_cast<float>((n2 + 127) << 23);
  float e = y * s1 * s2;
  e = x < -104.0f ? 0.0f : e;
  return x > 89.0f ? __builtin_inff() : e;
}

/** e^x for x <= 0 (or NaN), as in softmax's exp(x - max): results below 2^-126 (x < -87.34)
 *  are flushed to 0 instead of rounded to a subnormal, so 2^n is one normal scale factor and no
 *  overflow select is needed: ~20 vector instructions to exp's ~28 (the AVX2 set's softmax is
 *  bound by them). NaN in gives NaN out (through the polynomial). Same 1 ulp as exp above 2^-126. */
TESSERA_VMATH float exp_nonpos(float x) {
  int32_t ni;
  const float y = vmath::exp_reduced(x, ni);
  const float scale = std::bit_cast<float>((ni + 127) << 23);  // n in [-126, 0] where it is used
  return x < -87.33654475f ? 0.0f : y * scale;
}

/** Natural log. x = 2^e m with m in [sqrt(1/2), sqrt(2)); log(m) = f - f^2/2 + f^3 P(f) with
 *  f = m - 1; subnormals are scaled by 2^23 first. log(0) = -inf, log(x < 0) = NaN. */
TESSERA_VMATH float log(float x) {
  const bool sub = x < 1.17549435e-38f;
  const float xs = sub ? x * 8388608.0f : x;
  const int32_t bits = std::bit_cast<int32_t>(xs);
  int32_t e = ((bits >> 23) & 0xff) - 127 - (sub ? 23 : 0);
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f800000);  // [1, 2)
  const bool big = m > 1.41421356237f;
  m = big ? m * 0.5f : m;
  e = big ? e + 1 : e;
  const float f = m - 1.0f, z = f * f, fe = static_cast<float>(e);
  float y = 7.0376836292e-2f;
  y = vmath::fma(y, f, -1.1514610310e-1f);
  y = vmath::fma(y, f, 1.1676998740e-1f);
  y = vmath::fma(y, f, -1.2420140846e-1f);
  y = vmath::fma(y, f, 1.4249322787e-1f);
  y = vmath::fma(y, f, -1.6668057665e-1f);
  y = vmath::fma(y, f, 2.0000714765e-1f);
  y = vmath::fma(y, f, -2.4999993993e-1f);
  y = vmath::fma(y, f, 3.3333331174e-1f);
  y = y * f * z;
  y = y + fe * -2.12194440e-4f;
  y = y - 0.5f * z;
  float r = f + y;
  r = r + fe * 0.693359375f;
  r = x == 0.0f ? -__builtin_inff() : r;
  r = x == __builtin_inff() ? x : r;
  return (x < 0.0f || x != x) ? __builtin_nanf("") : r;
}

/** tanh: an odd polynomial below |x| = 0.625, 1 - 2 / (e^{2|x|} + 1) above (saturating at 9). */
TESSERA_VMATH float tanh(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = vmath::fma(p, z, 2.06390887954e-2f);
  p = vmath::fma(p, z, -5.37397155531e-2f);
  p = vmath::fma(p, z, 1.33314422036e-1f);
  p = vmath::fma(p, z, -3.33332819422e-1f);
  const float small = p * z * x + x;
  const float e = vmath::exp(2.0f * (ax < 9.0f ? ax : 9.0f));
  const float big = 1.0f - 2.0f / (e + 1.0f);
  const float r = ax < 0.625f ? small : (x < 0.0f ? -big : big);
  return x != x ? x : r;
}

/** erfc(a) for a >= 0 (saturating at 10): t e^{-a^2 + q(t)}, t = 1 / (1 + a/2), the Chebyshev
 *  fit of Numerical Recipes (relative error < 1.2e-7 everywhere). */
TESSERA_VMATH float erfc_nonneg(float a) {
  a = a < 10.0f ? a : 10.0f;
  const float t = 1.0f / vmath::fma(0.5f, a, 1.0f);
  float q = 0.17087277f;
  q = vmath::fma(q, t, -0.82215223f);
  q = vmath::fma(q, t, 1.48851587f);
  q = vmath::fma(q, t, -1.13520398f);
  q = vmath::fma(q, t, 0.27886807f);
  q = vmath::fma(q, t, -0.18628806f);
  q = vmath::fma(q, t, 0.09678418f);
  q = vmath::fma(q, t, 0.37409196f);
  q = vmath::fma(q, t, 1.00002368f);
  q = vmath::fma(q, t, -1.26551223f);
  return t * vmath::exp(vmath::fma(-a, a, q));
}

/** erf: the Maclaurin series (12 terms, Horner in x^2) below |x| = 1; above, 1 - erfc with
 *  the Chebyshev-fitted erfc of Numerical Recipes (relative error < 1.2e-7 of erfc <= 0.16). */
TESSERA_VMATH float erf(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float z = x * x;
  // 2/sqrt(pi) * (-1)^n / (n! (2n + 1)), n = 11 down to 0.
  float p = -1.22905553e-09f;
  p = vmath::fma(p, z, 1.48071928e-08f);
  p = vmath::fma(p, z, -1.63658447e-07f);
  p = vmath::fma(p, z, 1.64621144e-06f);
  p = vmath::fma(p, z, -1.49256504e-05f);
  p = vmath::fma(p, z, 1.20553330e-04f);
  p = vmath::fma(p, z, -8.54832702e-04f);
  p = vmath::fma(p, z, 5.22397763e-03f);
  p = vmath::fma(p, z, -2.68661706e-02f);
  p = vmath::fma(p, z, 1.12837917e-01f);
  p = vmath::fma(p, z, -3.76126389e-01f);
  p = vmath::fma(p, z, 1.12837917e+00f);
  const float small = p * x;
  const float big = 1.0f - vmath::erfc_nonneg(ax);
  const float r = ax < 1.0f ? small : (x < 0.0f ? -big : big);
  return x != x ? x : r;
}

TESSERA_VMATH float sigmoid(float x) { return 1.0f / (1.0f + vmath::exp(-x)); }
TESSERA_VMATH float silu(float x) { return x / (1.0f + vmath::exp(-x)); }
/** erfc(a) for a >= 0 (held at its value at 4 beyond, where erfc is 1.5e-8) without exp: a
 *  rational function of u = a/2 - 1 in [-1, 1] (degree 7 over 7, fitted to erfc on [0, 4] by
 *  iteratively reweighted least squares; 7e-9 absolute in exact arithmetic, ~3e-7 evaluated in
 *  f32 near a = 0). Written in u, not a, so the alternating terms stay small: in a they cancel
 *  from ~40 down to 1e-8.
 *  Absolute, not relative, accuracy: for GELU, whose tail x Phi(x) is tiny anyway. */
TESSERA_VMATH float erfc_rational(float a) {
  const float u = vmath::fma(a, 0.5f, -1.0f);
  float p = -4.5582585508726972e-3f;
  p = vmath::fma(p, u, 3.0923765071510734e-2f);
  p = vmath::fma(p, u, -8.9689384771431763e-2f);
  p = vmath::fma(p, u, 1.4574178377393968e-1f);
  p = vmath::fma(p, u, -1.4449306652258215e-1f);
  p = vmath::fma(p, u, 8.7931862344660827e-2f);
  p = vmath::fma(p, u, -3.0534067941705489e-2f);
  p = vmath::fma(p, u, 4.6777421051234207e-3f);
  float q = 5.8227569886181885e-2f;
  q = vmath::fma(q, u, 5.2430457371463668e-1f);
  q = vmath::fma(q, u, 1.6073381783480305f);
  q = vmath::fma(q, u, 3.1689324500805562f);
  q = vmath::fma(q, u, 4.0344552574403192f);
  q = vmath::fma(q, u, 3.8541239507041665f);
  q = vmath::fma(q, u, 2.3087900338406993f);
  q = vmath::fma(q, u, 1.0f);
  // Selected at the end rather than clamping a (see exp): beyond 4, 0 (erfc(4) is 1.5e-8). Not
  // the rational's 2.3e-8 held constant: GELU's far tail x erfc / 2 then grew with |x| (-1.2e-6 at
  // x = -100 where PyTorch gives -0) and gelu(-inf) was -inf where every other backend and
  // PyTorch give NaN. A NaN fails the test and passes through.
  return a > 4.0f ? 0.0f : p / q;
}

/** Exact GELU, x Phi(x) = x erfc(-x / sqrt 2) / 2: one erfc of |x| / sqrt 2 serves both signs
 *  (1 + erf(z) is 2 - erfc(z) for z >= 0 and erfc(-z) below), so no lane evaluates two formulas.
 *  The exp-free rational erfc makes this ~20 vector instructions (the exp-based erfc took ~50 and
 *  held GELU at 14 GB/s); absolute error 4e-7 (the test's bound is 1e-6). */
TESSERA_VMATH float gelu(float x) {
  const float z = x * 0.70710678118654752f;
  const float c = vmath::erfc_rational(__builtin_fabsf(z));  // NaN in: NaN through erfc_rational
  const float one_plus_erf = z < 0.0f ? c : 2.0f - c;
  return 0.5f * x * one_plus_erf;
}
/** 1 + tanh u as 2e / (1 + e) below 0 and 2 / (1 + e) above, e = e^{-2|u|}: through tanh (which
 *  saturates at 1 - 6e-8) the far negative tail was x * 3e-8, not 0, and gelu_tanh(-inf) -inf,
 *  not PyTorch's NaN. */
TESSERA_VMATH float one_plus_tanh(float u) {
  const float e = vmath::exp(-2.0f * __builtin_fabsf(u));  // 0 beyond |u| ~ 52; NaN stays NaN
  return (u < 0.0f ? 2.0f * e : 2.0f) / (1.0f + e);
}
TESSERA_VMATH float gelu_tanh(float x) {
  return 0.5f * x * vmath::one_plus_tanh(0.79788456080286535588f * vmath::fma(0.044715f * x * x, x, x));
}

// Backward of the activations that need the pre-activation z: g * act'(z) (kernels/activation.h).
TESSERA_VMATH float gelu_grad(float g, float z) {
  const float a = z * 0.70710678118654752f;
  const float c = vmath::erfc_nonneg(a < 0.0f ? -a : a);
  const float cdf = 0.5f * (a < 0.0f ? c : 2.0f - c);
  const float pdf = vmath::exp(-0.5f * z * z) * 0.39894228040143267794f;
  return g * vmath::fma(z, pdf, cdf);
}
/** d/dz of z (1 + tanh u) / 2 with 1 + tanh u and 1 - tanh^2 u from e = e^{-2|u|}:
 *  1 - tanh^2 = 4e / (1 + e)^2, 1 + tanh = 2e / (1 + e) below 0 and 2 / (1 + e) above. Through
 *  tanh itself both cancel to f32's ulp of 1 in the tails (-1.4e-6 at z = -5.7, where PyTorch
 *  gives -8.4e-9). */
TESSERA_VMATH float gelu_tanh_grad(float g, float z) {
  const float z2 = z * z;
  const float u = 0.79788456080286535588f * vmath::fma(0.044715f * z2, z, z);
  const float e = vmath::exp(-2.0f * __builtin_fabsf(u));  // 0 for |u| beyond ~52; NaN stays NaN
  const float inv = 1.0f / (1.0f + e);
  const float one_plus_t = (u < 0.0f ? 2.0f * e : 2.0f) * inv;
  const float sech2 = 4.0f * e * inv * inv;
  const float du = 0.79788456080286535588f * vmath::fma(3.0f * 0.044715f, z2, 1.0f);
  return g * (0.5f * one_plus_t + 0.5f * z * sech2 * du);
}
TESSERA_VMATH float silu_grad(float g, float z) {
  const float s = vmath::sigmoid(z);
  return g * s * vmath::fma(z, 1.0f - s, 1.0f);
}

#undef TESSERA_VMATH

// Functors with the core/kernels interface: the vectorisable float versions, and double (and
// everything else) through the shared functor, so results in double stay correctly rounded.
// always_inline: GCC otherwise keeps the larger ones (gelu = erf + exp) as a call inside the
// kernel loop, which then does not vectorise (gelu ran at 1.3 GB/s in the AVX2 set).
#define TESSERA_VMATH_FUNCTOR(Name, Shared, fn)                               \
  struct Name {                                                               \
    [[gnu::always_inline]] float operator()(float x) const { return vmath::fn(x); } \
    template <class T> T operator()(T x) const { return kernels::Shared{}(x); } \
  };
TESSERA_VMATH_FUNCTOR(ExpFn, ExpFn, exp)
TESSERA_VMATH_FUNCTOR(LogFn, LogFn, log)
TESSERA_VMATH_FUNCTOR(TanhFn, TanhFn, tanh)
TESSERA_VMATH_FUNCTOR(ErfFn, ErfFn, erf)
TESSERA_VMATH_FUNCTOR(SigmoidFn, SigmoidFn, sigmoid)
TESSERA_VMATH_FUNCTOR(SiluFn, SiluFn, silu)
TESSERA_VMATH_FUNCTOR(GeluFn, GeluFn, gelu)
TESSERA_VMATH_FUNCTOR(GeluTanhFn, GeluTanhFn, gelu_tanh)
#undef TESSERA_VMATH_FUNCTOR

#define TESSERA_VMATH_GRAD_FUNCTOR(Name, Shared, fn)                                      \
  struct Name {                                                                           \
    [[gnu::always_inline]] float operator()(float g, float z) const { return vmath::fn(g, z); } \
    template <class T> T operator()(T g, T z) const { return kernels::Shared{}(g, z); }   \
  };
TESSERA_VMATH_GRAD_FUNCTOR(GeluGradFn, GeluGradFn, gelu_grad)
TESSERA_VMATH_GRAD_FUNCTOR(GeluTanhGradFn, GeluTanhGradFn, gelu_tanh_grad)
TESSERA_VMATH_GRAD_FUNCTOR(SiluGradFn, SiluGradFn, silu_grad)
#undef TESSERA_VMATH_GRAD_FUNCTOR

/** The CPU's functor for a core/kernels functor: the vectorised one where there is one. */
template <class Fn> struct Fast { using type = Fn; };
template <> struct Fast<kernels::ExpFn> { using type = ExpFn; };
template <> struct Fast<kernels::LogFn> { using type = LogFn; };
template <> struct Fast<kernels::TanhFn> { using type = TanhFn; };
template <> struct Fast<kernels::ErfFn> { using type = ErfFn; };
template <> struct Fast<kernels::SigmoidFn> { using type = SigmoidFn; };
template <> struct Fast<kernels::SiluFn> { using type = SiluFn; };
template <> struct Fast<kernels::GeluFn> { using type = GeluFn; };
template <> struct Fast<kernels::GeluTanhFn> { using type = GeluTanhFn; };
template <class Fn> using fast_t = typename Fast<Fn>::type;

}  // namespace tessera::cpu::vmath
