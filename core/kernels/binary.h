#pragma once
// Elementwise binary functors shared by every backend. Arithmetic functors return T;
// comparison and logical functors return bool. `T` is the compute type.
#include <type_traits>

#include "math.h"

namespace tessera::kernels {

struct AddFn {
  template <class T> TESSERA_HD T operator()(T a, T b) const { return static_cast<T>(static_cast<wrap_t<T>>(a) + static_cast<wrap_t<T>>(b)); }
};
struct SubFn {
  template <class T> TESSERA_HD T operator()(T a, T b) const { return static_cast<T>(static_cast<wrap_t<T>>(a) - static_cast<wrap_t<T>>(b)); }
};
struct MulFn {
  template <class T> TESSERA_HD T operator()(T a, T b) const { return static_cast<T>(static_cast<wrap_t<T>>(a) * static_cast<wrap_t<T>>(b)); }
};
struct DivFn {  // true division; the front-end promotes integer operands to float
  template <class T> TESSERA_HD T operator()(T a, T b) const { return a / b; }
};
struct PowFn {
  template <class T> TESSERA_HD T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return kmath::pow(a, b);
    } else {
      // Integer power by squaring; a negative exponent truncates like 1/a^|b| does.
      if constexpr (std::is_signed_v<T>) {
        if (b < T(0)) return static_cast<T>(a == T(1) ? 1 : (a == T(-1) ? ((b & 1) ? -1 : 1) : 0));
      }
      T result = 1, base = a;
      for (T e = b; e > T(0); e = static_cast<T>(e >> 1)) {
        if (e & 1) result = MulFn{}(result, base);
        base = MulFn{}(base, base);
      }
      return result;
    }
  }
};
// maximum/minimum propagate NaN like torch.maximum (std::fmax would drop it).
struct MaximumFn {
  template <class T> TESSERA_HD T operator()(T a, T b) const {
    if (kmath::isnan(a)) return a;
    if (kmath::isnan(b)) return b;
    return a > b ? a : b;
  }
};
struct MinimumFn {
  template <class T> TESSERA_HD T operator()(T a, T b) const {
    if (kmath::isnan(a)) return a;
    if (kmath::isnan(b)) return b;
    return a < b ? a : b;
  }
};

#define TESSERA_BOOL_BINARY(Name, expr)                                         \
  struct Name {                                                                 \
    template <class T> TESSERA_HD bool operator()(T a, T b) const { return expr; } \
  };
TESSERA_BOOL_BINARY(EqFn, a == b)
TESSERA_BOOL_BINARY(NeFn, a != b)
TESSERA_BOOL_BINARY(LtFn, a < b)
TESSERA_BOOL_BINARY(LeFn, a <= b)
TESSERA_BOOL_BINARY(GtFn, a > b)
TESSERA_BOOL_BINARY(GeFn, a >= b)
TESSERA_BOOL_BINARY(LogicalAndFn, (a != T(0)) && (b != T(0)))
TESSERA_BOOL_BINARY(LogicalOrFn, (a != T(0)) || (b != T(0)))
TESSERA_BOOL_BINARY(LogicalXorFn, (a != T(0)) != (b != T(0)))
#undef TESSERA_BOOL_BINARY

}  // namespace tessera::kernels
