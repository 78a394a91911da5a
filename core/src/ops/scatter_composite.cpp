// Indexing forms built on scatter_add, where and embedding: index_add, scatter (overwrite),
// scatter_reduce and embedding's padding_idx. Their gradients come from the parts, except
// scatter_reduce's prod, amax and amin (their own kernel), whose backward is written here.
#include <cmath>
#include <limits>

#include "autograd/record.h"
#include "dispatch.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/indexing.h"

namespace tessera {

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  detail::check_defined(weight, "embedding", "weight");
  TESSERA_CHECK(weight.dim() == 2, "embedding", "weight must be [num, dim], got ", shape_str(weight.shape()));
  const int64_t n = weight.size(0);
  TESSERA_CHECK(padding_idx >= -n && padding_idx < n, "embedding", "padding_idx ", padding_idx, " is outside the ", n, " rows");
  const int64_t p = padding_idx < 0 ? padding_idx + n : padding_idx;
  const Tensor out = embedding(weight, indices);
  if (!out.requires_grad()) return out;
  // The padding row's lookups are cut from the graph, so that row's gradient stays zero.
  return where(eq(indices, p).unsqueeze(-1), out.detach(), out);
}

Tensor index_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, double alpha) {
  detail::check_defined(x, "index_add");
  detail::check_defined(index, "index_add", "index");
  detail::check_defined(src, "index_add", "source");
  detail::check_index_dtype(index, "index_add");
  const int64_t a = normalize_axis(axis, std::max<int64_t>(x.dim(), 1), "index_add");
  bool fits = index.dim() == 1 && src.dim() == x.dim() && (x.dim() == 0 || src.size(a) == index.numel());
  for (int64_t d = 0; fits && d < x.dim(); ++d) fits = d == a || src.size(d) == x.size(d);
  TESSERA_CHECK(fits, "index_add", "source ", shape_str(src.shape()), " must match input ", shape_str(x.shape()), " except along axis ", a,
                ", where it has one slice per entry of the 1-D index ", shape_str(index.shape()));
  Shape ishape(static_cast<size_t>(x.dim()), 1);
  if (x.dim() > 0) ishape[static_cast<size_t>(a)] = index.numel();
  const Tensor spread = index.reshape(ishape).expand(src.shape()).contiguous();
  return scatter_add(x, a, spread, alpha == 1.0 ? src : mul(src, alpha));
}

namespace {
// How many sources land on each element of x (x's dtype; 0 where none).
Tensor hit_counts(const Tensor& x, int64_t axis, const Tensor& index) {
  const DType dt = is_floating(x.dtype()) ? x.dtype() : DType::f32;
  return scatter_add(zeros(x.shape(), dt, x.device()), axis, index, ones(index.shape(), dt, x.device()));
}
}  // namespace

Tensor scatter(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src) {
  detail::check_defined(x, "scatter");
  const Tensor written = scatter_add(zeros_like(x), axis, index, src);
  return where(gt(hit_counts(x, axis, index), 0), written, x);
}

namespace {
// The value that leaves the other operand unchanged: 1 for prod, the dtype's lowest value for
// amax and its highest for amin (infinities for floating dtypes).
Scalar neutral(ScatterReduce reduce, DType dt) {
  if (reduce == ScatterReduce::prod) return int64_t{1};
  const bool lowest = reduce == ScatterReduce::amax;
  if (is_floating(dt)) return lowest ? -INFINITY : INFINITY;
  switch (dt) {
    case DType::i8: return lowest ? int64_t{-128} : int64_t{127};
    case DType::u8: return lowest ? int64_t{0} : int64_t{255};
    case DType::i32: return int64_t{lowest ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max()};
    default: return lowest ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
  }
}

// The source's gradient: `part_grad` (shaped like the index) where the source took part, 0 elsewhere.
Tensor source_grad(const Tensor& part_grad, const Shape& src_shape) {
  Tensor gs = zeros(src_shape, part_grad.dtype(), part_grad.device());
  Tensor part = gs;
  for (int64_t d = 0; d < gs.dim(); ++d) part = part.narrow(d, 0, part_grad.size(d));
  part.copy_(part_grad);
  return gs;
}

// amax/amin: the gradient is shared evenly among x (where included) and the sources equal to the result.
std::vector<Tensor> extremum_backward(const Tensor& g, const Tensor& x, const Tensor& part, const Tensor& out, const Tensor& hit,
                                      int64_t axis, const Tensor& index, bool include_self, const Shape& src_shape) {
  const DType dt = g.dtype();
  const Tensor src_wins = eq(part, gather(out, axis, index));
  const Tensor self_wins = include_self ? eq(x, out) : logical_not(hit);
  const Tensor count = scatter_add(self_wins.to(dt), axis, index, src_wins.to(dt));
  const Tensor share = div(g, count);  // inf/NaN where count is 0, never selected below
  return {where(self_wins, share, 0.0), source_grad(where(src_wins, gather(share, axis, index), 0.0), src_shape)};
}

// prod: d out / d v = out / v; a zero element (the only one) gets the product of the others.
std::vector<Tensor> prod_backward(const Tensor& g, const Tensor& x, const Tensor& part, const Tensor& out, const Tensor& hit,
                                  int64_t axis, const Tensor& index, bool include_self, const Shape& src_shape) {
  const DType dt = g.dtype();
  const Tensor self_zero = include_self ? eq(x, 0) : zeros(x.shape(), DType::boolean, x.device());
  const Tensor src_zero = eq(part, 0);
  const Tensor zero_count = scatter_add(self_zero.to(dt), axis, index, src_zero.to(dt));
  Tensor others = include_self ? where(self_zero, 1.0, x) : where(hit, 1.0, x);  // the product of the nonzero elements
  scatter_reduce_(others, axis, index, where(src_zero, 1.0, part), ScatterReduce::prod);
  const Tensor lone_zero_grad = where(eq(zero_count, 1), mul(g, others), 0.0);
  const Tensor g_out = mul(g, out);
  const Tensor gx = include_self ? where(self_zero, lone_zero_grad, div(g_out, x)) : where(hit, 0.0, g);
  const Tensor gs = where(src_zero, gather(lone_zero_grad, axis, index), div(gather(g_out, axis, index), part));
  return {gx, source_grad(gs, src_shape)};
}

Tensor scatter_combine(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, ScatterReduce reduce, bool include_self) {
  detail::check_index_dtype(index, "scatter_reduce");
  TESSERA_CHECK(index.dim() == x.dim() && src.dim() == x.dim(), "scatter_reduce", "input ", shape_str(x.shape()), ", index ",
                shape_str(index.shape()), " and source ", shape_str(src.shape()), " must have the same rank");
  const int64_t a = normalize_axis(axis, std::max<int64_t>(x.dim(), 1), "scatter_reduce");
  Tensor out, hit;
  {
    NoGradGuard no_grad;
    // Counted in f32 (or f64): the device backends' scatter_add has no f16/bf16 kernel.
    hit = include_self ? Tensor() : gt(hit_counts(x.dtype() == DType::f64 ? x : zeros(x.shape(), DType::f32, x.device()), a, index), 0);
    out = include_self ? x.clone() : where(hit, full({}, neutral(reduce, x.dtype()), x.dtype(), x.device()), x);
    scatter_reduce_(out, a, index, src, reduce);
  }
  if (autograd::needs_grad({&x, &src})) {
    Tensor part = src.detach();
    for (int64_t d = 0; d < part.dim(); ++d) part = part.narrow(d, 0, index.size(d));
    part = part.to(x.dtype());
    autograd::record("scatter_reduce", {x, src}, out,
                     [x = x.detach(), part, out = out.detach(), hit, a, index, reduce, include_self, src_shape = src.shape()](const Tensor& g) {
                       if (reduce == ScatterReduce::prod) return prod_backward(g, x, part, out, hit, a, index, include_self, src_shape);
                       return extremum_backward(g, x, part, out, hit, a, index, include_self, src_shape);
                     });
  }
  return out;
}
}  // namespace

Tensor scatter_reduce(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, ScatterReduce reduce, bool include_self) {
  detail::check_defined(x, "scatter_reduce");
  detail::check_defined(src, "scatter_reduce", "source");
  if (reduce == ScatterReduce::prod || reduce == ScatterReduce::amax || reduce == ScatterReduce::amin)
    return scatter_combine(x, axis, index, src, reduce, include_self);
  if (reduce == ScatterReduce::sum && include_self) return scatter_add(x, axis, index, src);
  const Tensor counts = hit_counts(x, axis, index), hit = gt(counts, 0);
  const Tensor base = include_self ? x : where(hit, zeros_like(x), x);
  const Tensor total = scatter_add(base, axis, index, src);
  if (reduce == ScatterReduce::sum) return total;
  TESSERA_CHECK(is_floating(x.dtype()), "scatter_reduce", "\"mean\" needs a floating dtype, got ", x.dtype());
  // The divisor is 1, not 0, where no source lands: those quotients are discarded by the where,
  // but 0 / 0 in the division's backward leaked NaN into x's gradient through it.
  const Tensor divisor = include_self ? add(counts, 1.0) : where(hit, counts, ones_like(counts));
  return where(hit, div(total, divisor), x);
}

}  // namespace tessera
