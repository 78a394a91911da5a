// Reduction front-end. Kernels reduce a sorted set of axes and drop them; keepdim, dtype
// rules and the composite reductions (mean, var, logsumexp, norm, any/all) live here.
#include "tessera/ops/reduction.h"

#include <algorithm>
#include <cmath>

#include "autograd/record.h"
#include "dispatch.h"
#include "tessera/autocast.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/indexing.h"

namespace tessera {

namespace {
using detail::run_kernel;

Axes normalize_axes(const Axes& axes, int64_t rank, const char* op) {
  Axes out;
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d) out.push_back(d);
    return out;
  }
  for (int64_t a : axes) out.push_back(normalize_axis(a, rank, op));
  std::sort(out.begin(), out.end());
  TESSERA_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, "axis repeated in ", shape_str(axes));
  if (rank == 0) out.clear();  // a 0-d tensor reduces over nothing
  return out;
}

Shape reduced_shape(const Shape& shape, const Axes& axes, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    const bool reduced = std::binary_search(axes.begin(), axes.end(), d);
    if (!reduced) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

int64_t reduced_count(const Shape& shape, const Axes& axes) {
  int64_t n = 1;
  for (int64_t a : axes) n *= shape[a];
  return n;
}

Tensor reduce(OpId op, const Tensor& x, const Axes& axes_in, bool keepdim, DType out_dtype) {
  const char* name = op_name(op).data();
  detail::check_defined(x, name);
  const Axes axes = normalize_axes(axes_in, x.dim(), name);
  const Tensor in = x.to(out_dtype).detach();
  Tensor out = empty(reduced_shape(x.shape(), axes, false), out_dtype, x.device());
  if (out.numel() > 0) {
    OpAttrs attrs;
    attrs.axes = axes;
    run_kernel(op, x.device(), std::span<const Tensor>(&in, 1), std::span<Tensor>(&out, 1), attrs);
  }
  return keepdim ? out.view(reduced_shape(x.shape(), axes, true)) : out;
}

DType accumulate_type(DType dt) { return is_floating(dt) ? dt : DType::i64; }

void check_nonempty(const Tensor& x, const Axes& axes_in, const char* op) {
  const Axes axes = normalize_axes(axes_in, x.dim(), op);
  const bool out_empty = numel(reduced_shape(x.shape(), axes, false)) == 0;
  TESSERA_CHECK(out_empty || reduced_count(x.shape(), axes) > 0, op, "cannot reduce over an empty axis of a ",
                shape_str(x.shape()), " tensor");
}

Tensor finite_or_zero(const Tensor& m) { return where(lt(abs(m), INFINITY), m, 0.0); }
}  // namespace

namespace {
// The gradient of a reduction arrives with the reduced shape; view it with the reduced axes
// kept (size 1) so it broadcasts against the input.
Tensor keepdim_view(const Tensor& g, const Shape& in_shape, const Axes& axes_in) {
  return g.reshape(reduced_shape(in_shape, normalize_axes(axes_in, static_cast<int64_t>(in_shape.size()), "backward"), true));
}
}  // namespace

Tensor sum(const Tensor& x_in, const Axes& axes, bool keepdim) {
  const Tensor x = autocast(x_in, CastPolicy::f32);
  detail::check_defined(x, "sum");
  Tensor out = reduce(OpId::Sum, x, axes, keepdim, accumulate_type(x.dtype()));
  if (autograd::needs_grad({&x})) {
    autograd::record("sum", {x}, out, [shape = x.shape(), axes](const Tensor& g) {
      return std::vector<Tensor>{keepdim_view(g, shape, axes).expand(shape)};
    });
  }
  return out;
}

Tensor prod(const Tensor& x_in, const Axes& axes, bool keepdim) {
  const Tensor x = autocast(x_in, CastPolicy::f32);
  detail::check_defined(x, "prod");
  Tensor out = reduce(OpId::Prod, x, axes, keepdim, accumulate_type(x.dtype()));
  if (autograd::needs_grad({&x})) {
    // NOTE: out / x is NaN where x == 0; products through zeros need the exclusive product.
    autograd::record("prod", {x}, out, [xs = autograd::saved(x), y = autograd::saved(out), axes](const Tensor& g) {
      return std::vector<Tensor>{mul(keepdim_view(mul(g, y), xs.shape(), axes), reciprocal(xs))};
    });
  }
  return out;
}

namespace {
Tensor extreme(OpId op, const char* name, const Tensor& x, const Axes& axes, bool keepdim) {
  detail::check_defined(x, name);
  check_nonempty(x, axes, name);
  Tensor out = reduce(op, x, axes, keepdim, x.dtype());
  if (autograd::needs_grad({&x})) {
    // Ties share the gradient evenly.
    autograd::record(name, {x}, out, [xs = autograd::saved(x), y = autograd::saved(out), axes](const Tensor& g) {
      const Tensor hit = eq(xs, keepdim_view(y, xs.shape(), axes)).to(g.dtype());
      const Tensor count = sum(hit, axes, true);
      return std::vector<Tensor>{div(mul(hit, keepdim_view(g, xs.shape(), axes)), count)};
    });
  }
  return out;
}
}  // namespace

Tensor amax(const Tensor& x, const Axes& axes, bool keepdim) { return extreme(OpId::Max, "max", x, axes, keepdim); }
Tensor amin(const Tensor& x, const Axes& axes, bool keepdim) { return extreme(OpId::Min, "min", x, axes, keepdim); }

Tensor mean(const Tensor& x, const Axes& axes, bool keepdim) {
  detail::check_defined(x, "mean");
  detail::check_floating(x, "mean");
  const int64_t count = reduced_count(x.shape(), normalize_axes(axes, x.dim(), "mean"));
  // count == 0 gives 0/0 = NaN, like PyTorch.
  return div(sum(x, axes, keepdim), Scalar(static_cast<double>(count)));
}

namespace {
Tensor arg_reduce(OpId op, const Tensor& x, std::optional<int64_t> axis, bool keepdim) {
  const char* name = op_name(op).data();
  detail::check_defined(x, name);
  TESSERA_CHECK(x.dtype() != DType::boolean, name, "not supported for dtype bool");
  if (!axis) {
    TESSERA_CHECK(x.numel() > 0, name, "cannot reduce an empty ", shape_str(x.shape()), " tensor");
    Tensor r = arg_reduce(op, x.reshape({-1}), 0, false);
    return keepdim ? r.view(Shape(static_cast<size_t>(x.dim()), 1)) : r;
  }
  const int64_t a = x.dim() == 0 ? 0 : normalize_axis(*axis, x.dim(), name);
  if (x.dim() == 0) return zeros({}, DType::i64, x.device());
  check_nonempty(x, {a}, name);
  Tensor out = empty(reduced_shape(x.shape(), {a}, false), DType::i64, x.device());
  if (out.numel() > 0) {
    OpAttrs attrs;
    attrs.axis = a;
    run_kernel(op, x.device(), std::span<const Tensor>(&x, 1), std::span<Tensor>(&out, 1), attrs);
  }
  return keepdim ? out.view(reduced_shape(x.shape(), {a}, true)) : out;
}
}  // namespace

Tensor argmax(const Tensor& x, std::optional<int64_t> axis, bool keepdim) { return arg_reduce(OpId::Argmax, x, axis, keepdim); }
Tensor argmin(const Tensor& x, std::optional<int64_t> axis, bool keepdim) { return arg_reduce(OpId::Argmin, x, axis, keepdim); }

namespace {
// The values are gathered at the indices, so the gradient flows to the one element picked
// (amax instead splits it between ties).
ValuesIndices values_at_arg(OpId op, const Tensor& x, int64_t axis, bool keepdim) {
  const char* name = op == OpId::Argmax ? "max" : "min";
  detail::check_defined(x, name);
  if (x.dim() == 0) {
    normalize_axis(axis, 1, name);
    return {x.clone(), zeros({}, DType::i64, x.device())};
  }
  const int64_t a = normalize_axis(axis, x.dim(), name);
  const Tensor index = arg_reduce(op, x, a, true);
  const Tensor values = take_along_axis(x, index, a);
  if (keepdim) return {values, index};
  return {values.squeeze(a), index.squeeze(a)};
}
}  // namespace

ValuesIndices max(const Tensor& x, int64_t axis, bool keepdim) { return values_at_arg(OpId::Argmax, x, axis, keepdim); }
ValuesIndices min(const Tensor& x, int64_t axis, bool keepdim) { return values_at_arg(OpId::Argmin, x, axis, keepdim); }

Tensor var(const Tensor& x, const Axes& axes, int64_t correction, bool keepdim) {
  detail::check_defined(x, "var");
  detail::check_floating(x, "var");
  TESSERA_CHECK(correction >= 0, "var", "correction must be >= 0, got ", correction);
  const int64_t count = reduced_count(x.shape(), normalize_axes(axes, x.dim(), "var"));
  // Two passes (mean, then squared deviations) keep the precision a one-pass formula loses.
  const Tensor deviation = sub(x, mean(x, axes, true));
  const double denom = static_cast<double>(std::max<int64_t>(count - correction, 0));
  return div(sum(square(deviation), axes, keepdim), Scalar(denom));
}

namespace {
// sqrt whose gradient is 0 where the result is 0 instead of g * 0.5 / 0 = inf (which the chain
// rule then multiplies by a zero to give NaN): std of a constant slice and the 2-norm of a zero
// vector take the subgradient 0, as in PyTorch, so one constant feature cannot poison a run.
Tensor sqrt_zero_subgradient(const Tensor& v, const char* name) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = sqrt(v);
  }
  if (autograd::needs_grad({&v})) {
    autograd::record(name, {v}, out, [y = autograd::saved(out)](const Tensor& g) {
      return std::vector<Tensor>{where(eq(y, 0), zeros({}, g.dtype(), g.device()), div(mul(g, 0.5), y))};
    });
  }
  return out;
}
}  // namespace

Tensor std(const Tensor& x, const Axes& axes, int64_t correction, bool keepdim) {
  return sqrt_zero_subgradient(var(x, axes, correction, keepdim), "std");
}

Tensor logsumexp(const Tensor& x, const Axes& axes, bool keepdim) {
  detail::check_defined(x, "logsumexp");
  const Tensor xf = x.to(to_floating(x.dtype()));
  // Shifting by a non-finite max would turn an all -inf slice into NaN; shift by 0 there.
  const Tensor shift = finite_or_zero(amax(xf.detach(), axes, true));
  Tensor r = add(log(sum(exp(sub(xf, shift)), axes, true)), shift);
  if (!keepdim) r = r.view(reduced_shape(x.shape(), normalize_axes(axes, x.dim(), "logsumexp"), false));
  return r;
}

Tensor norm(const Tensor& x, double p, const Axes& axes, bool keepdim) {
  detail::check_defined(x, "norm");
  detail::check_floating(x, "norm");
  TESSERA_CHECK(p > 0, "norm", "p must be positive, got ", p);
  if (p == 1.0) return sum(abs(x), axes, keepdim);
  if (p == 2.0) return sqrt_zero_subgradient(sum(square(x), axes, keepdim), "norm");
  if (std::isinf(p)) return amax(abs(x), axes, keepdim);
  // d||x||_p / dx = sign(x) |x|^(p-1) / ||x||^(p-1), taken as 0 where the norm is 0 (PyTorch).
  Tensor out;
  {
    NoGradGuard no_grad;
    out = pow(sum(pow(abs(x), Scalar(p)), axes, keepdim), Scalar(1.0 / p));
  }
  if (autograd::needs_grad({&x})) {
    const Shape kept = reduced_shape(x.shape(), normalize_axes(axes, x.dim(), "norm"), true);
    autograd::record("norm", {x}, out, [xs = autograd::saved(x), y = autograd::saved(out), kept, p](const Tensor& g) {
      const Tensor yk = y.reshape(kept), gk = g.reshape(kept);
      const Tensor d = div(mul(sign(xs), pow(abs(xs), Scalar(p - 1))), pow(yk, Scalar(p - 1)));
      return std::vector<Tensor>{where(eq(yk, 0), zeros({}, g.dtype(), g.device()), mul(gk, d))};
    });
  }
  return out;
}

Tensor any(const Tensor& x, const Axes& axes, bool keepdim) {
  detail::check_defined(x, "any");
  const Tensor b = x.dtype() == DType::boolean ? x : ne(x, 0);
  if (reduced_count(x.shape(), normalize_axes(axes, x.dim(), "any")) == 0) {
    return reduce(OpId::Sum, b, axes, keepdim, DType::i64).to(DType::boolean);  // empty: false
  }
  return reduce(OpId::Max, b, axes, keepdim, DType::boolean);
}

Tensor all(const Tensor& x, const Axes& axes, bool keepdim) {
  detail::check_defined(x, "all");
  const Tensor b = x.dtype() == DType::boolean ? x : ne(x, 0);
  if (reduced_count(x.shape(), normalize_axes(axes, x.dim(), "all")) == 0) {
    return eq(reduce(OpId::Sum, b, axes, keepdim, DType::i64), 0);  // empty: true
  }
  return reduce(OpId::Min, b, axes, keepdim, DType::boolean);
}

Tensor cumsum(const Tensor& x_in, int64_t axis) {
  const Tensor x = autocast(x_in, CastPolicy::f32);
  detail::check_defined(x, "cumsum");
  if (x.dim() == 0) {
    normalize_axis(axis, 0, "cumsum");
    return cumsum(x.reshape({1}), 0).reshape({});
  }
  OpAttrs attrs;
  attrs.axis = normalize_axis(axis, x.dim(), "cumsum");
  const Tensor in = x.to(accumulate_type(x.dtype())).detach();
  Tensor out = empty(x.shape(), in.dtype(), x.device());
  if (out.numel() > 0) run_kernel(OpId::Cumsum, x.device(), std::span<const Tensor>(&in, 1), std::span<Tensor>(&out, 1), attrs);
  if (autograd::needs_grad({&x})) {
    // Reverse cumulative sum: total - (inclusive prefix) + self.
    autograd::record("cumsum", {x}, out, [axis = attrs.axis](const Tensor& g) {
      return std::vector<Tensor>{add(sub(sum(g, {axis}, true), cumsum(g, axis)), g)};
    });
  }
  return out;
}

namespace {
Tensor softmax_like(OpId op, const Tensor& x_in, int64_t axis) {
  const Tensor x = autocast(x_in, CastPolicy::f32);
  const char* name = op_name(op).data();
  detail::check_defined(x, name);
  if (x.dim() == 0) {
    normalize_axis(axis, 0, name);
    return softmax_like(op, x.reshape({1}), 0).reshape({});
  }
  OpAttrs attrs;
  attrs.axis = normalize_axis(axis, x.dim(), name);
  const Tensor in = x.to(to_floating(x.dtype())).detach();
  Tensor out = empty(x.shape(), in.dtype(), x.device());
  if (out.numel() > 0) run_kernel(op, x.device(), std::span<const Tensor>(&in, 1), std::span<Tensor>(&out, 1), attrs);
  if (autograd::needs_grad({&x})) {
    const int64_t a = attrs.axis;
    if (op == OpId::Softmax) {
      autograd::record(name, {x}, out, [y = autograd::saved(out), a](const Tensor& g) {
        return std::vector<Tensor>{mul(y, sub(g, sum(mul(g, y), {a}, true)))};
      });
    } else {
      autograd::record(name, {x}, out, [y = autograd::saved(out), a](const Tensor& g) {
        return std::vector<Tensor>{sub(g, mul(exp(y), sum(g, {a}, true)))};
      });
    }
  }
  return out;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t axis) { return softmax_like(OpId::Softmax, x, axis); }
Tensor log_softmax(const Tensor& x, int64_t axis) { return softmax_like(OpId::LogSoftmax, x, axis); }

}  // namespace tessera
