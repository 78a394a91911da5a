#pragma once
// Value conversion between element types, shared by the copy/cast kernels of every backend.
// Float -> integer saturates and maps NaN to 0 (C++ leaves both undefined); -> bool tests != 0.
#include <cstdint>
#include <limits>
#include <type_traits>

#include "half.h"

namespace tessera::kernels {

template <class T> inline constexpr bool is_float_like_v =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <class D, class S> TESSERA_HD_INLINE D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<D, bool>) {
    if constexpr (is_float_like_v<S>) return static_cast<double>(static_cast<compute_t<S>>(v)) != 0.0;  // NaN -> true
    else return v != S(0);
  } else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) {
    // Wide sources (double, int64) convert through double so Half(double) can round once.
    if constexpr (std::is_same_v<S, bool>) return D(v ? 1.0f : 0.0f);
    else if constexpr (std::is_same_v<S, double> || std::is_same_v<S, int64_t> || std::is_same_v<S, int32_t>) return D(static_cast<double>(v));
    else return D(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<D>) {
    if constexpr (is_float_like_v<S>) {
      using W = std::conditional_t<std::is_same_v<S, double>, double, float>;
      const W w = static_cast<W>(v);
      if (!(w == w)) return D(0);
      constexpr W lo = static_cast<W>(std::numeric_limits<D>::min());
      constexpr W hi = static_cast<W>(std::numeric_limits<D>::max());
      if (w <= lo) return std::numeric_limits<D>::min();
      if (w >= hi) return std::numeric_limits<D>::max();
      return static_cast<D>(w);
    } else {
      return static_cast<D>(v);  // integer -> integer wraps (modular), like PyTorch
    }
  } else {  // float or double destination
    if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) return static_cast<D>(static_cast<float>(v));
    else return static_cast<D>(v);
  }
}

/** Converts a double attribute (fill value, RNG bound) to T with the same rules. */
template <class T> TESSERA_HD_INLINE T from_double(double v) { return convert<T, double>(v); }

}  // namespace tessera::kernels
