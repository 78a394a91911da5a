#pragma once
// Elementwise unary functors: one definition, run by every backend (CPU loops, GPU grid-stride
// kernels, Kokkos parallel_for). `T` is the compute type: float, double or an integer type.
#include <type_traits>

#include "math.h"

namespace tessera::kernels {

#define TESSERA_FLOAT_UNARY(Name, expr)                                   \
  struct Name {                                                          \
    template <class T> TESSERA_HD T operator()(T x) const { return expr; } \
  };

TESSERA_FLOAT_UNARY(ExpFn, kmath::exp(x))
TESSERA_FLOAT_UNARY(Expm1Fn, kmath::expm1(x))
TESSERA_FLOAT_UNARY(LogFn, kmath::log(x))
TESSERA_FLOAT_UNARY(Log1pFn, kmath::log1p(x))
TESSERA_FLOAT_UNARY(SqrtFn, kmath::sqrt(x))
TESSERA_FLOAT_UNARY(RsqrtFn, T(1) / kmath::sqrt(x))
TESSERA_FLOAT_UNARY(ReciprocalFn, T(1) / x)
TESSERA_FLOAT_UNARY(SinFn, kmath::sin(x))
TESSERA_FLOAT_UNARY(CosFn, kmath::cos(x))
TESSERA_FLOAT_UNARY(TanhFn, kmath::tanh(x))
TESSERA_FLOAT_UNARY(ErfFn, kmath::erf(x))
// 1 / (1 + exp(-x)) saturates cleanly at both ends: exp(-x) -> inf gives 0, -> 0 gives 1.
TESSERA_FLOAT_UNARY(SigmoidFn, T(1) / (T(1) + kmath::exp(-x)))
TESSERA_FLOAT_UNARY(SiluFn, x / (T(1) + kmath::exp(-x)))
TESSERA_FLOAT_UNARY(GeluFn, T(0.5) * x * (T(1) + kmath::erf(x * T(0.70710678118654752440))))
TESSERA_FLOAT_UNARY(GeluTanhFn,
                    T(0.5) * x * (T(1) + kmath::tanh(T(0.79788456080286535588) * (x + T(0.044715) * x * x * x))))
// softplus(x) = log(1 + exp(x)), written as max(x, 0) + log1p(exp(-|x|)) so it never overflows.
TESSERA_FLOAT_UNARY(SoftplusFn, (x > T(0) ? x : T(0)) + kmath::log1p(kmath::exp(-kmath::fabs(x))))
TESSERA_FLOAT_UNARY(TanFn, kmath::tan(x))
TESSERA_FLOAT_UNARY(AsinFn, kmath::asin(x))
TESSERA_FLOAT_UNARY(AcosFn, kmath::acos(x))
TESSERA_FLOAT_UNARY(AtanFn, kmath::atan(x))
TESSERA_FLOAT_UNARY(Log2Fn, kmath::log2(x))
TESSERA_FLOAT_UNARY(Log10Fn, kmath::log10(x))
TESSERA_FLOAT_UNARY(SinhFn, kmath::sinh(x))
TESSERA_FLOAT_UNARY(CoshFn, kmath::cosh(x))
TESSERA_FLOAT_UNARY(AsinhFn, kmath::asinh(x))
TESSERA_FLOAT_UNARY(AcoshFn, kmath::acosh(x))
TESSERA_FLOAT_UNARY(AtanhFn, kmath::atanh(x))
TESSERA_FLOAT_UNARY(Exp2Fn, kmath::exp2(x))
// x * tanh(softplus(x)), with softplus written to saturate like SoftplusFn.
TESSERA_FLOAT_UNARY(MishFn, x * kmath::tanh((x > T(0) ? x : T(0)) + kmath::log1p(kmath::exp(-kmath::fabs(x)))))
// relu6(x + 3), with NaN passing through both comparisons: hardswish(-inf) is -inf * 0 = NaN,
// as in PyTorch and ONNX's x * max(0, min(1, x / 6 + 0.5)).
template <class T> TESSERA_HD_INLINE T relu6_shift3(T x) {
  const T r = x + T(3);
  return r < T(0) ? T(0) : (r > T(6) ? T(6) : r);
}
TESSERA_FLOAT_UNARY(HardswishFn, x * relu6_shift3(x) / T(6))
TESSERA_FLOAT_UNARY(HardsigmoidFn, relu6_shift3(x) / T(6))
TESSERA_FLOAT_UNARY(EluFn, x > T(0) ? x : (x <= T(0) ? kmath::expm1(x) : x))
// SELU's constants (Klambauer et al. 2017), as PyTorch and ONNX define them.
TESSERA_FLOAT_UNARY(SeluFn, T(1.0507009873554804934193349852946) *
                                (x > T(0) ? x : (x <= T(0) ? T(1.6732632423543772848170429916717) * kmath::expm1(x) : x)))
#undef TESSERA_FLOAT_UNARY

struct NegFn {
  template <class T> TESSERA_HD T operator()(T x) const {
    if constexpr (kWrapsViaUnsigned<T>) return static_cast<T>(wrap_t<T>(0) - static_cast<wrap_t<T>>(x));  // -INT_MIN wraps
    else return static_cast<T>(-x);  // keeps -0.0
  }
};
struct AbsFn {
  template <class T> TESSERA_HD T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      return kmath::fabs(x);
    } else if constexpr (std::is_unsigned_v<T>) {
      return x;
    } else {
      return static_cast<T>(x < T(0) ? wrap_t<T>(0) - static_cast<wrap_t<T>>(x) : static_cast<wrap_t<T>>(x));  // abs(INT_MIN) wraps
    }
  }
};
struct SignFn {
  template <class T> TESSERA_HD T operator()(T x) const {
    if (kmath::isnan(x)) return x;
    if constexpr (std::is_unsigned_v<T>) {
      return static_cast<T>(x != T(0));
    } else {
      return static_cast<T>((T(0) < x) - (x < T(0)));
    }
  }
};
struct SquareFn {
  template <class T> TESSERA_HD T operator()(T x) const { return static_cast<T>(static_cast<wrap_t<T>>(x) * static_cast<wrap_t<T>>(x)); }
};
// NOTE: written as a comparison, not max(x, 0): NaN must propagate (x > 0 is false for NaN,
// so we return x itself when it is not a number).
struct ReluFn {
  template <class T> TESSERA_HD T operator()(T x) const { return (x > T(0) || kmath::isnan(x)) ? x : T(0); }
};
struct FloorFn {
  template <class T> TESSERA_HD T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return kmath::floor(x); else return x;
  }
};
struct CeilFn {
  template <class T> TESSERA_HD T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return kmath::ceil(x); else return x;
  }
};
struct TruncFn {
  template <class T> TESSERA_HD T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return kmath::trunc(x); else return x;
  }
};
// Round half to even, like torch.round and numpy.round (nearbyint in the default rounding mode).
struct RoundFn {
  template <class T> TESSERA_HD T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return kmath::nearbyint(x); else return x;
  }
};

}  // namespace tessera::kernels
