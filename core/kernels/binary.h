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

struct Atan2Fn {  // the front-end promotes integer operands to float
  template <class T> TESSERA_HD T operator()(T a, T b) const { return kmath::atan2(a, b); }
};
// Integer division by zero has no value: these give 0 (PyTorch raises on the CPU, CUDA returns
// garbage); INT_MIN by -1 overflows, so -1 is answered without dividing.
// C's fmod: the result takes the dividend's sign.
struct FmodFn {
  template <class T> TESSERA_HD T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return kmath::fmod(a, b);
    } else {
      if (b == T(0)) return T(0);
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);
      }
      return static_cast<T>(a % b);
    }
  }
};
// Python's %: the result takes the divisor's sign (torch.remainder, numpy.mod).
struct RemainderFn {
  template <class T> TESSERA_HD T operator()(T a, T b) const {
    const T r = FmodFn{}(a, b);
    if constexpr (std::is_floating_point_v<T>) {
      if (r != T(0) && ((r < T(0)) != (b < T(0)))) return r + b;
      // A zero remainder takes the divisor's sign, like Python (-0.0 for a negative divisor).
      return r == T(0) ? (b < T(0) ? -T(0) : T(0)) : r;
    } else {
      if constexpr (std::is_signed_v<T>) {
        if (r != T(0) && ((r < T(0)) != (b < T(0)))) return static_cast<T>(r + b);
      }
      return r;
    }
  }
};
// floor(a / b). Floats follow PyTorch's div_floor (through fmod, so 7.0 // 0.1 stays exact-ish
// where floor of the rounded quotient would not).
struct FloorDivideFn {
  template <class T> TESSERA_HD T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (b == T(0)) return a / b;
      const T mod = kmath::fmod(a, b);
      T div = (a - mod) / b;
      if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
      if (div == T(0)) return (a / b) * T(0);  // a zero with the quotient's sign: -0.0 for 0 / -3 and -0.0 / 3
      T floordiv = kmath::floor(div);
      if (div - floordiv > T(0.5)) floordiv += T(1);
      return floordiv;
    } else {
      if (b == T(0)) return T(0);
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return static_cast<T>(wrap_t<T>(0) - static_cast<wrap_t<T>>(a));  // -INT_MIN wraps
        const T q = static_cast<T>(a / b);
        return (a % b != T(0) && ((a < T(0)) != (b < T(0)))) ? static_cast<T>(q - T(1)) : q;
      } else {
        return static_cast<T>(a / b);
      }
    }
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

// Bitwise functors run on integers and bool only (DTypePolicy::Bitwise); the float branch is
// never instantiated by a backend and exists so the op-list expansion compiles.
#define TESSERA_BITWISE_BINARY(Name, op)                                       \
  struct Name {                                                                \
    template <class T> TESSERA_HD T operator()(T a, T b) const {               \
      if constexpr (std::is_integral_v<T>) return static_cast<T>(a op b);      \
      else return a;                                                           \
    }                                                                          \
  };
TESSERA_BITWISE_BINARY(BitwiseAndFn, &)
TESSERA_BITWISE_BINARY(BitwiseOrFn, |)
TESSERA_BITWISE_BINARY(BitwiseXorFn, ^)
#undef TESSERA_BITWISE_BINARY

// Shifts as PyTorch defines them for any count: a count outside [0, bits) shifts everything
// out (left: 0; right: the sign, so -1 for a negative signed value), where C++ has no answer.
// The left shift runs on the unsigned type, so a negative value shifts its two's-complement bits.
struct LeftShiftFn {
  template <class T> TESSERA_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      constexpr int bits = 8 * sizeof(T);
      if constexpr (std::is_signed_v<T>) {
        if (b < T(0)) return T(0);
      }
      if (static_cast<int64_t>(b) >= bits) return T(0);
      return static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) << b);
    } else {
      return a;
    }
  }
};
struct RightShiftFn {
  template <class T> TESSERA_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      constexpr int bits = 8 * sizeof(T);
      if constexpr (std::is_signed_v<T>) {
        if (b < T(0) || static_cast<int64_t>(b) >= bits) return a < T(0) ? T(-1) : T(0);
      } else {
        if (static_cast<int64_t>(b) >= bits) return T(0);
      }
      return static_cast<T>(a >> b);  // arithmetic for signed values (C++20)
    } else {
      return a;
    }
  }
};

}  // namespace tessera::kernels
