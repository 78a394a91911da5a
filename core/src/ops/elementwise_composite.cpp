// Elementwise ops written with other ops (their gradients follow from the parts): the
// options and predicates PyTorch users expect that need no kernel of their own.
#include <limits>

#include "dispatch.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"

namespace tessera {

namespace {
Tensor as_float(const Tensor& x) { return is_floating(x.dtype()) ? x : cast(x, DType::f32); }

// The largest finite value of a float dtype.
double dtype_max(DType dt) {
  switch (dt) {
    case DType::f16: return 65504.0;
    case DType::bf16: return 3.3895313892515355e38;
    case DType::f32: return std::numeric_limits<float>::max();
    default: return std::numeric_limits<double>::max();
  }
}
}  // namespace

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  detail::check_defined(x, "leaky_relu");
  const Tensor xf = as_float(x);
  return where(gt(xf, 0), xf, mul(xf, negative_slope));
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  detail::check_defined(x, "softplus");
  TESSERA_CHECK(beta != 0, "softplus", "beta must be nonzero");
  const Tensor xf = as_float(x);
  const Tensor bx = mul(xf, beta);
  return where(gt(bx, threshold), xf, div(softplus(bx), beta));
}

Tensor isinf(const Tensor& x) {
  detail::check_defined(x, "isinf");
  if (!is_floating(x.dtype())) return zeros(x.shape(), DType::boolean, x.device());
  return eq(abs(x), std::numeric_limits<double>::infinity());
}

Tensor isfinite(const Tensor& x) {
  detail::check_defined(x, "isfinite");
  if (!is_floating(x.dtype())) return ones(x.shape(), DType::boolean, x.device());
  return lt(abs(x), std::numeric_limits<double>::infinity());  // false for NaN and +-inf
}

Tensor nan_to_num(const Tensor& x, double nan, std::optional<double> posinf, std::optional<double> neginf) {
  detail::check_defined(x, "nan_to_num");
  if (!is_floating(x.dtype())) return x.clone();
  const double big = dtype_max(x.dtype());
  const double inf = std::numeric_limits<double>::infinity();
  Tensor out = where(isnan(x), full({}, nan, x.dtype(), x.device()), x);
  out = where(eq(x, inf), full({}, posinf.value_or(big), x.dtype(), x.device()), out);
  return where(eq(x, -inf), full({}, neginf.value_or(-big), x.dtype(), x.device()), out);
}

Tensor logical_not(const Tensor& x) {
  detail::check_defined(x, "logical_not");
  return eq(x, zeros({}, x.dtype(), x.device()));
}

Tensor bitwise_not(const Tensor& x) {
  detail::check_defined(x, "bitwise_not");
  TESSERA_CHECK(!is_floating(x.dtype()), "bitwise_not", "needs an integer or bool tensor, got ", x.dtype());
  if (x.dtype() == DType::boolean) return logical_not(x);
  // All ones in x's own dtype (255 for uint8), so the xor keeps the dtype.
  return bitwise_xor(x, full({}, x.dtype() == DType::u8 ? Scalar(int64_t{255}) : Scalar(int64_t{-1}), x.dtype(), x.device()));
}

Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode) {
  if (rounding_mode.empty()) return div(a, b);
  if (rounding_mode == "floor") return floor_divide(a, b);
  TESSERA_CHECK(rounding_mode == "trunc", "div", "rounding_mode must be \"trunc\", \"floor\" or empty, got \"", rounding_mode, "\"");
  detail::check_defined(a, "div", "first operand");
  detail::check_defined(b, "div", "second operand");
  if (is_floating(promote_types(a.dtype(), b.dtype()))) return trunc(div(a, b));
  // Integers: floor toward zero = floor_divide, plus one where the quotient is negative and inexact.
  const Tensor q = floor_divide(a, b);
  const Tensor inexact = logical_and(ne(fmod(a, b), 0), logical_xor(lt(a, 0), lt(b, 0)));
  return where(inexact, add(q, 1), q);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  detail::check_defined(x, "masked_fill", "input");
  detail::check_defined(mask, "masked_fill", "mask");
  TESSERA_CHECK(mask.dtype() == DType::boolean, "masked_fill", "mask must be bool, got ", mask.dtype());
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  TESSERA_CHECK(shape == x.shape(), "masked_fill", "mask ", shape_str(mask.shape()), " does not broadcast to input ", shape_str(x.shape()));
  return where(mask, full({}, value, x.dtype(), x.device()), x);
}

}  // namespace tessera
