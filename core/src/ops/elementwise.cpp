// Elementwise front-end: dtype policy, promotion, broadcasting, then one kernel call.
#include "tessera/ops/elementwise.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "autograd/record.h"
#include "dispatch.h"
#include "tessera/backend/registry.h"
#include "tessera/ops/creation.h"

namespace tessera {

namespace {
using detail::run_kernel;

const char* name_of(OpId op) { return op_name(op).data(); }  // names are string literals

Tensor unary(OpId op, const Tensor& x) {
  const char* name = name_of(op);
  detail::check_defined(x, name);
  TESSERA_CHECK(x.dtype() != DType::boolean, name, "not supported for dtype bool");
  const bool to_float = op_info(op).policy == DTypePolicy::Float && !is_floating(x.dtype());
  const Tensor in = to_float ? cast(x, DType::f32) : x;
  Tensor out = empty(x.shape(), in.dtype(), x.device());
  if (out.numel() > 0) run_kernel(op, x.device(), std::span<const Tensor>(&in, 1), std::span<Tensor>(&out, 1));
  if (autograd::needs_grad({&x})) autograd::record_unary(op, x, out);
  return out;
}

// Runs binary `op` on operands already known to share a device, computing in `common`.
Tensor binary_in(OpId op, const Tensor& a, const Tensor& b, DType common) {
  const char* name = name_of(op);
  // As in PyTorch: bool + bool is a logical or, bool * bool a logical and (other arithmetic
  // on bools is an error below). Messages keep the name the user called.
  if (common == DType::boolean && (op == OpId::Add || op == OpId::Mul)) op = op == OpId::Add ? OpId::LogicalOr : OpId::LogicalAnd;
  const DTypePolicy policy = op_info(op).policy;
  DType compute = common, result = common;
  switch (policy) {
    case DTypePolicy::Arith:
      TESSERA_CHECK(common != DType::boolean, name, "not supported for dtype bool");
      break;
    case DTypePolicy::TrueDiv: compute = result = to_floating(common); break;
    case DTypePolicy::Compare: result = DType::boolean; break;
    case DTypePolicy::Logical: compute = result = DType::boolean; break;
    case DTypePolicy::Bitwise:
      TESSERA_CHECK(!is_floating(common), name, "needs integer or bool operands, got ", a.dtype(), " and ", b.dtype());
      TESSERA_CHECK(common != DType::boolean || (op != OpId::LeftShift && op != OpId::RightShift), name, "not supported for dtype bool");
      break;
    default: break;
  }
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  const bool rec = autograd::needs_grad({&a, &b});
  Tensor out = empty(shape, result, a.device());
  {
    NoGradGuard no_grad;
    const Tensor in[2] = {detail::expand_to(a.to(compute), shape), detail::expand_to(b.to(compute), shape)};
    if (out.numel() > 0) run_kernel(op, a.device(), in, std::span<Tensor>(&out, 1));
  }
  if (rec) autograd::record_binary(op, a, b, out);
  return out;
}

Tensor binary(OpId op, const Tensor& a, const Tensor& b) {
  const char* name = name_of(op);
  detail::check_defined(a, name, "first operand");
  detail::check_defined(b, name, "second operand");
  detail::common_device({&a, &b}, name);
  return binary_in(op, a, b, promote_types(a.dtype(), b.dtype()));
}

// A Python-style scalar never widens the tensor's category (see scalar.h).
DType with_scalar(DType t, const Scalar& s) {
  if (!s.is_integral() && !is_floating(t)) return DType::f32;
  if (t == DType::boolean) return s.is_integral() ? DType::i64 : DType::f32;
  return t;
}

Tensor scalar_like(const Tensor& t, const Scalar& s, DType dtype) { return full({}, s, dtype, t.device()); }

Tensor binary(OpId op, const Tensor& a, Scalar b) {
  detail::check_defined(a, name_of(op), "first operand");
  const DType dt = with_scalar(a.dtype(), b);
  return binary_in(op, a, scalar_like(a, b, dt), dt);
}
Tensor binary(OpId op, Scalar a, const Tensor& b) {
  detail::check_defined(b, name_of(op), "second operand");
  const DType dt = with_scalar(b.dtype(), a);
  return binary_in(op, scalar_like(b, a, dt), b, dt);
}
}  // namespace

Tensor neg(const Tensor& x) { return unary(OpId::Neg, x); }
Tensor abs(const Tensor& x) { return unary(OpId::Abs, x); }
Tensor sign(const Tensor& x) { return unary(OpId::Sign, x); }
Tensor square(const Tensor& x) { return unary(OpId::Square, x); }
Tensor relu(const Tensor& x) { return unary(OpId::Relu, x); }
Tensor floor(const Tensor& x) { return unary(OpId::Floor, x); }
Tensor ceil(const Tensor& x) { return unary(OpId::Ceil, x); }
Tensor round(const Tensor& x) { return unary(OpId::Round, x); }
Tensor exp(const Tensor& x) { return unary(OpId::Exp, x); }
Tensor expm1(const Tensor& x) { return unary(OpId::Expm1, x); }
Tensor log(const Tensor& x) { return unary(OpId::Log, x); }
Tensor log1p(const Tensor& x) { return unary(OpId::Log1p, x); }
Tensor sqrt(const Tensor& x) { return unary(OpId::Sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary(OpId::Rsqrt, x); }
Tensor reciprocal(const Tensor& x) { return unary(OpId::Reciprocal, x); }
Tensor sin(const Tensor& x) { return unary(OpId::Sin, x); }
Tensor cos(const Tensor& x) { return unary(OpId::Cos, x); }
Tensor tanh(const Tensor& x) { return unary(OpId::Tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(OpId::Sigmoid, x); }
Tensor gelu(const Tensor& x, bool tanh_approximation) { return unary(tanh_approximation ? OpId::GeluTanh : OpId::Gelu, x); }
Tensor silu(const Tensor& x) { return unary(OpId::Silu, x); }
Tensor softplus(const Tensor& x) { return unary(OpId::Softplus, x); }
Tensor erf(const Tensor& x) { return unary(OpId::Erf, x); }
Tensor trunc(const Tensor& x) { return unary(OpId::Trunc, x); }
Tensor tan(const Tensor& x) { return unary(OpId::Tan, x); }
Tensor asin(const Tensor& x) { return unary(OpId::Asin, x); }
Tensor acos(const Tensor& x) { return unary(OpId::Acos, x); }
Tensor atan(const Tensor& x) { return unary(OpId::Atan, x); }
Tensor log2(const Tensor& x) { return unary(OpId::Log2, x); }
Tensor log10(const Tensor& x) { return unary(OpId::Log10, x); }
Tensor sinh(const Tensor& x) { return unary(OpId::Sinh, x); }
Tensor cosh(const Tensor& x) { return unary(OpId::Cosh, x); }
Tensor asinh(const Tensor& x) { return unary(OpId::Asinh, x); }
Tensor acosh(const Tensor& x) { return unary(OpId::Acosh, x); }
Tensor atanh(const Tensor& x) { return unary(OpId::Atanh, x); }
Tensor exp2(const Tensor& x) { return unary(OpId::Exp2, x); }
Tensor mish(const Tensor& x) { return unary(OpId::Mish, x); }
Tensor hardswish(const Tensor& x) { return unary(OpId::Hardswish, x); }
Tensor hardsigmoid(const Tensor& x) { return unary(OpId::Hardsigmoid, x); }
Tensor selu(const Tensor& x) { return unary(OpId::Selu, x); }
Tensor elu(const Tensor& x, double alpha) {
  if (alpha == 1.0) return unary(OpId::Elu, x);
  const Tensor xf = is_floating(x.dtype()) ? x : cast(x, DType::f32);
  return where(gt(xf, 0), xf, mul(expm1(xf), alpha));
}

#define TESSERA_DEFINE_BINARY(fname, id)                                                  \
  Tensor fname(const Tensor& a, const Tensor& b) { return binary(OpId::id, a, b); }      \
  Tensor fname(const Tensor& a, Scalar b) { return binary(OpId::id, a, b); }             \
  Tensor fname(Scalar a, const Tensor& b) { return binary(OpId::id, a, b); }
TESSERA_DEFINE_BINARY(add, Add)
TESSERA_DEFINE_BINARY(sub, Sub)
TESSERA_DEFINE_BINARY(mul, Mul)
TESSERA_DEFINE_BINARY(div, Div)
TESSERA_DEFINE_BINARY(pow, Pow)
TESSERA_DEFINE_BINARY(maximum, Maximum)
TESSERA_DEFINE_BINARY(minimum, Minimum)
TESSERA_DEFINE_BINARY(atan2, Atan2)
TESSERA_DEFINE_BINARY(fmod, Fmod)
TESSERA_DEFINE_BINARY(remainder, Remainder)
TESSERA_DEFINE_BINARY(floor_divide, FloorDivide)
TESSERA_DEFINE_BINARY(eq, Eq)
TESSERA_DEFINE_BINARY(ne, Ne)
TESSERA_DEFINE_BINARY(lt, Lt)
TESSERA_DEFINE_BINARY(le, Le)
TESSERA_DEFINE_BINARY(gt, Gt)
TESSERA_DEFINE_BINARY(ge, Ge)
TESSERA_DEFINE_BINARY(logical_and, LogicalAnd)
TESSERA_DEFINE_BINARY(logical_or, LogicalOr)
TESSERA_DEFINE_BINARY(logical_xor, LogicalXor)
TESSERA_DEFINE_BINARY(bitwise_and, BitwiseAnd)
TESSERA_DEFINE_BINARY(bitwise_or, BitwiseOr)
TESSERA_DEFINE_BINARY(bitwise_xor, BitwiseXor)
TESSERA_DEFINE_BINARY(bitwise_left_shift, LeftShift)
TESSERA_DEFINE_BINARY(bitwise_right_shift, RightShift)
#undef TESSERA_DEFINE_BINARY

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(a, b); }
Tensor operator-(Scalar a, const Tensor& b) { return sub(a, b); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(a, b); }
Tensor operator/(Scalar a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
#define TESSERA_DEFINE_OPERATOR(sym, fname)                                  \
  Tensor operator sym(const Tensor& a, const Tensor& b) { return fname(a, b); } \
  Tensor operator sym(const Tensor& a, Scalar b) { return fname(a, b); }        \
  Tensor operator sym(Scalar a, const Tensor& b) { return fname(a, b); }
TESSERA_DEFINE_OPERATOR(&, bitwise_and)
TESSERA_DEFINE_OPERATOR(|, bitwise_or)
TESSERA_DEFINE_OPERATOR(^, bitwise_xor)
TESSERA_DEFINE_OPERATOR(<<, bitwise_left_shift)
TESSERA_DEFINE_OPERATOR(>>, bitwise_right_shift)
TESSERA_DEFINE_OPERATOR(==, eq)
TESSERA_DEFINE_OPERATOR(!=, ne)
TESSERA_DEFINE_OPERATOR(<, lt)
TESSERA_DEFINE_OPERATOR(<=, le)
TESSERA_DEFINE_OPERATOR(>, gt)
TESSERA_DEFINE_OPERATOR(>=, ge)
#undef TESSERA_DEFINE_OPERATOR
Tensor operator~(const Tensor& a) { return bitwise_not(a); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  detail::check_defined(cond, "where", "condition");
  detail::check_defined(a, "where", "first value");
  detail::check_defined(b, "where", "second value");
  const Device device = detail::common_device({&cond, &a, &b}, "where");
  TESSERA_CHECK(cond.dtype() == DType::boolean, "where", "condition must be bool, got ", cond.dtype());
  const DType dt = promote_types(a.dtype(), b.dtype());
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty(shape, dt, device);
  {
    NoGradGuard no_grad;
    const Tensor in[3] = {detail::expand_to(cond, shape), detail::expand_to(a.to(dt), shape),
                          detail::expand_to(b.to(dt), shape)};
    if (out.numel() > 0) run_kernel(OpId::Where, device, in, std::span<Tensor>(&out, 1));
  }
  if (autograd::needs_grad({&a, &b})) {
    autograd::record("where", {a, b}, out, [c = cond](const Tensor& g) {
      const Tensor zero = zeros({}, g.dtype(), g.device());
      return std::vector<Tensor>{where(c, g, zero), where(c, zero, g)};
    });
  }
  return out;
}
Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  detail::check_defined(a, "where", "first value");
  return where(cond, a, full({}, b, with_scalar(a.dtype(), b), a.device()));
}
Tensor where(const Tensor& cond, Scalar a, const Tensor& b) {
  detail::check_defined(b, "where", "second value");
  return where(cond, full({}, a, with_scalar(b.dtype(), a), b.device()), b);
}

// clamp has its own gradient rule rather than minimum/maximum's: at exactly lo or hi the input
// gets the whole gradient (maximum/minimum would split ties 50/50), and tensor bounds get it only
// where they are the result -- PyTorch's clamp_backward_min_max.
Tensor clamp(const Tensor& x, const Tensor& lo, const Tensor& hi) {
  detail::check_defined(x, "clamp", "input");
  detail::check_defined(lo, "clamp", "min");
  detail::check_defined(hi, "clamp", "max");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = minimum(maximum(x, lo), hi);
  }
  if (autograd::needs_grad({&x, &lo, &hi}) && is_floating(out.dtype())) {
    autograd::record("clamp", {x, lo, hi}, out, [x = x.detach(), lo = lo.detach(), hi = hi.detach()](const Tensor& g) {
      const Tensor zero = zeros({}, g.dtype(), g.device());
      const Tensor gx = where(logical_and(ge(x, lo), le(x, hi)), g, zero);
      const Tensor glo = where(logical_and(lt(x, lo), lt(lo, hi)), g, zero);
      const Tensor ghi = where(logical_or(gt(x, hi), lt(hi, lo)), g, zero);
      return std::vector<Tensor>{gx, glo, ghi};
    });
  }
  return out;
}
Tensor clamp(const Tensor& x, Scalar lo, Scalar hi) {
  TESSERA_CHECK(lo.to_double() <= hi.to_double(), "clamp", "min ", lo.to_double(), " is greater than max ",
                hi.to_double());
  detail::check_defined(x, "clamp", "input");
  const DType dt = with_scalar(with_scalar(x.dtype(), lo), hi);
  return clamp(x, full({}, lo, dt, x.device()), full({}, hi, dt, x.device()));
}

Tensor lerp(const Tensor& a, const Tensor& b, Scalar w) { return add(a, mul(sub(b, a), w)); }
Tensor lerp(const Tensor& a, const Tensor& b, const Tensor& w) { return add(a, mul(sub(b, a), w)); }

Tensor cast(const Tensor& x, DType dtype) {
  detail::check_defined(x, "cast");
  Tensor out = empty(x.shape(), dtype, x.device());
  {
    NoGradGuard no_grad;
    out.copy_(x);
  }
  if (is_floating(dtype) && autograd::needs_grad({&x})) {
    autograd::record("cast", {x}, out, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  }
  return out;
}

Tensor isnan(const Tensor& x) { return ne(x, x); }

namespace {
bool same_geometry(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.offset() == b.offset() && a.shape() == b.shape() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

// Copies the bytes of contiguous `src` into contiguous `dst` (same size) on another device,
// through the host when neither side is host memory.
void transfer_into(Tensor& dst, const Tensor& src) {
  const size_t n = src.nbytes();
  if (n == 0) return;
  const Device to = dst.device();
  Backend& from_b = backend_for_device(src.device(), "copy");
  Backend& to_b = backend_for_device(to, "copy");
  if (from_b.host_accessible() && to_b.host_accessible()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), n);
  } else if (from_b.host_accessible()) {
    to_b.copy_from_host(dst.data_ptr(), src.data_ptr(), n, to.index);
  } else if (to_b.host_accessible()) {
    from_b.copy_to_host(dst.data_ptr(), src.data_ptr(), n, src.device().index);
  } else if (&from_b == &to_b) {
    to_b.copy_on_device(dst.data_ptr(), to.index, src.data_ptr(), src.device().index, n);
  } else {
    std::vector<char> staging(n);
    from_b.copy_to_host(staging.data(), src.data_ptr(), n, src.device().index);
    to_b.copy_from_host(dst.data_ptr(), staging.data(), n, to.index);
  }
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  detail::check_defined(src, "copy_", "source");
  TESSERA_CHECK(!grad_enabled() || (!requires_grad() && !src.requires_grad()), "copy_",
                "in-place ops on tensors that require grad are not recorded; run them under NoGradGuard "
                "(optimizer updates) or use out-of-place ops");
  TESSERA_CHECK(src.dim() <= dim(), "copy_", "cannot broadcast source ", shape_str(src.shape()), " to destination ",
                shape_str(shape()));
  if (numel() == 0) {
    (void)broadcast_shapes(src.shape(), shape(), "copy_");
    return *this;
  }
  Tensor s = src;
  if (s.device() != device()) {
    const Tensor packed = s.contiguous();
    if (is_contiguous() && dtype() == packed.dtype() && shape() == packed.shape()) {
      transfer_into(*this, packed);  // a plain device transfer needs no kernel
      return *this;
    }
    s = empty(packed.shape(), packed.dtype(), device());
    transfer_into(s, packed);
  }
  // A source overlapping the destination with another layout would be read after being
  // overwritten; copy it out first.
  if (s.storage() == storage() && !same_geometry(s, *this)) s = s.clone();
  if (s.shape() != shape()) {
    TESSERA_CHECK(broadcast_shapes(s.shape(), shape(), "copy_") == shape(), "copy_", "cannot broadcast source ",
                  shape_str(s.shape()), " to destination ", shape_str(shape()));
    s = s.expand(shape());
  }
  if (same_geometry(s, *this)) return *this;
  run_kernel(OpId::Copy, device(), std::span<const Tensor>(&s, 1), std::span<Tensor>(this, 1));
  return *this;
}

}  // namespace tessera
