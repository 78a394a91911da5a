#pragma once
// Elementwise ops. All accept any strides and broadcast NumPy-style; f16/bf16 compute in f32.
// Float-only ops (exp, log, ...) turn integer inputs into float32, like PyTorch.
// Errors name the op: "add: shapes [2, 3] and [4, 3] cannot be broadcast".
#include <optional>
#include <string>

#include "tessera/scalar.h"
#include "tessera/tensor.h"

namespace tessera {

// ---- unary ----
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
/** -1, 0 or 1 (NaN stays NaN). */
Tensor sign(const Tensor& x);
Tensor square(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
/** Rounds half to even. */
Tensor round(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
/** GELU; `tanh_approximation` selects the tanh form instead of the exact erf form. */
Tensor gelu(const Tensor& x, bool tanh_approximation = false);
Tensor silu(const Tensor& x);
/** log(1 + exp(x)), computed without overflow. */
Tensor softplus(const Tensor& x);
Tensor erf(const Tensor& x);
/** Rounds toward zero. */
Tensor trunc(const Tensor& x);
Tensor tan(const Tensor& x);
Tensor asin(const Tensor& x);
Tensor acos(const Tensor& x);
Tensor atan(const Tensor& x);
Tensor log2(const Tensor& x);
Tensor log10(const Tensor& x);
/** Hyperbolic functions and their inverses (acosh below 1 and atanh outside [-1, 1] are NaN). */
Tensor sinh(const Tensor& x);
Tensor cosh(const Tensor& x);
Tensor asinh(const Tensor& x);
Tensor acosh(const Tensor& x);
Tensor atanh(const Tensor& x);
Tensor exp2(const Tensor& x);
/** x * tanh(softplus(x)). */
Tensor mish(const Tensor& x);
/** x * relu6(x + 3) / 6. */
Tensor hardswish(const Tensor& x);
/** relu6(x + 3) / 6. */
Tensor hardsigmoid(const Tensor& x);
/** x > 0 ? x : alpha * (exp(x) - 1). */
Tensor elu(const Tensor& x, double alpha = 1.0);
/** scale * elu(x, alpha) with SELU's fixed constants. */
Tensor selu(const Tensor& x);
/** x > 0 ? x : negative_slope * x. */
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
/** log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's softplus). */
Tensor softplus(const Tensor& x, double beta, double threshold = 20.0);
/** True where x is +-inf (never for integers). */
Tensor isinf(const Tensor& x);
/** True where x is neither NaN nor +-inf. */
Tensor isfinite(const Tensor& x);
/** NaN -> nan, +inf -> posinf (default: the dtype's largest), -inf -> neginf (its lowest). */
Tensor nan_to_num(const Tensor& x, double nan = 0.0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);
/** True where x is zero (bool result, any input dtype). */
Tensor logical_not(const Tensor& x);
/** ~x: every bit flipped (integers); logical not for bool. */
Tensor bitwise_not(const Tensor& x);

// ---- binary (tensor or scalar operands) ----
#define TESSERA_DECLARE_BINARY(name)                \
  Tensor name(const Tensor& a, const Tensor& b);    \
  Tensor name(const Tensor& a, Scalar b);           \
  Tensor name(Scalar a, const Tensor& b);
TESSERA_DECLARE_BINARY(add)
TESSERA_DECLARE_BINARY(sub)
TESSERA_DECLARE_BINARY(mul)
/** True division: integer operands give float32. */
TESSERA_DECLARE_BINARY(div)
TESSERA_DECLARE_BINARY(pow)
/** Elementwise max/min; NaN propagates. */
TESSERA_DECLARE_BINARY(maximum)
TESSERA_DECLARE_BINARY(minimum)
/** atan2(a, b), the angle of the point (b, a); integer operands give float32. */
TESSERA_DECLARE_BINARY(atan2)
/** C's fmod: a - trunc(a / b) * b, the sign of a. Integer division by zero gives 0. */
TESSERA_DECLARE_BINARY(fmod)
/** Python's %: a - floor(a / b) * b, the sign of b. Integer division by zero gives 0. */
TESSERA_DECLARE_BINARY(remainder)
/** floor(a / b) (integers stay integers; no gradient). Integer division by zero gives 0. */
TESSERA_DECLARE_BINARY(floor_divide)
// Comparisons give bool.
TESSERA_DECLARE_BINARY(eq)
TESSERA_DECLARE_BINARY(ne)
TESSERA_DECLARE_BINARY(lt)
TESSERA_DECLARE_BINARY(le)
TESSERA_DECLARE_BINARY(gt)
TESSERA_DECLARE_BINARY(ge)
// Logical ops treat nonzero as true and give bool.
TESSERA_DECLARE_BINARY(logical_and)
TESSERA_DECLARE_BINARY(logical_or)
TESSERA_DECLARE_BINARY(logical_xor)
// Bitwise ops on integers and bool (the result has the promoted integer dtype). Shift counts
// outside [0, bits) shift every bit out: 0, or -1 for a negative value shifted right.
TESSERA_DECLARE_BINARY(bitwise_and)
TESSERA_DECLARE_BINARY(bitwise_or)
TESSERA_DECLARE_BINARY(bitwise_xor)
TESSERA_DECLARE_BINARY(bitwise_left_shift)
TESSERA_DECLARE_BINARY(bitwise_right_shift)
#undef TESSERA_DECLARE_BINARY

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a);
// Bitwise operators as in Python: & | ^ << >> and ~ (logical not on bool).
#define TESSERA_DECLARE_OPERATOR(sym)              \
  Tensor operator sym(const Tensor& a, const Tensor& b); \
  Tensor operator sym(const Tensor& a, Scalar b);        \
  Tensor operator sym(Scalar a, const Tensor& b);
TESSERA_DECLARE_OPERATOR(&)
TESSERA_DECLARE_OPERATOR(|)
TESSERA_DECLARE_OPERATOR(^)
TESSERA_DECLARE_OPERATOR(<<)
TESSERA_DECLARE_OPERATOR(>>)
// Comparisons as in libtorch and Python: elementwise, bool tensors (a > 2.0 is gt(a, 2.0)).
// Tensor identity is is_same(), not ==.
TESSERA_DECLARE_OPERATOR(==)
TESSERA_DECLARE_OPERATOR(!=)
TESSERA_DECLARE_OPERATOR(<)
TESSERA_DECLARE_OPERATOR(<=)
TESSERA_DECLARE_OPERATOR(>)
TESSERA_DECLARE_OPERATOR(>=)
#undef TESSERA_DECLARE_OPERATOR
Tensor operator~(const Tensor& a);

// ---- others ----
/** cond ? a : b, all three broadcast; `cond` must be bool. */
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);
/** min(max(x, lo), hi); NaN in x propagates. */
Tensor clamp(const Tensor& x, Scalar lo, Scalar hi);
Tensor clamp(const Tensor& x, const Tensor& lo, const Tensor& hi);
/** a + w * (b - a). */
Tensor lerp(const Tensor& a, const Tensor& b, Scalar w);
Tensor lerp(const Tensor& a, const Tensor& b, const Tensor& w);
/** Converts to `dtype` (a copy even when the dtype matches). */
Tensor cast(const Tensor& x, DType dtype);
/** True where x is NaN. */
Tensor isnan(const Tensor& x);
/** Division with PyTorch's rounding_mode: "trunc" or "floor" (integers stay integers); "" is div. */
Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode);
/** x with `value` where `mask` (bool, broadcast to x) is true. */
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);

}  // namespace tessera
