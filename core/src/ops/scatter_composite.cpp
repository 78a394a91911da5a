// Indexing forms built on scatter_add, where and embedding: index_add, scatter (overwrite),
// scatter_reduce (sum, mean) and embedding's padding_idx. Their gradients come from the parts.
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

Tensor scatter_reduce(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, ScatterReduce reduce, bool include_self) {
  detail::check_defined(x, "scatter_reduce");
  if (reduce == ScatterReduce::sum && include_self) return scatter_add(x, axis, index, src);
  const Tensor counts = hit_counts(x, axis, index), hit = gt(counts, 0);
  const Tensor base = include_self ? x : where(hit, zeros_like(x), x);
  const Tensor total = scatter_add(base, axis, index, src);
  if (reduce == ScatterReduce::sum) return total;
  TESSERA_CHECK(is_floating(x.dtype()), "scatter_reduce", "\"mean\" needs a floating dtype, got ", x.dtype());
  return where(hit, div(total, include_self ? add(counts, 1.0) : counts), x);
}

}  // namespace tessera
