#include "tessera/ops/indexing.h"

#include "autograd/record.h"
#include "dispatch.h"
#include "tessera/backend/registry.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduction.h"

namespace tessera {

Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index) {
  detail::check_defined(x, "index_select");
  detail::check_index_dtype(index, "index_select");
  const Device device = detail::common_device({&x, &index}, "index_select");
  TESSERA_CHECK(index.dim() <= 1, "index_select", "index must be 0-D or 1-D, got ", shape_str(index.shape()));
  TESSERA_CHECK(x.dim() >= 1, "index_select", "input must have at least one axis");
  OpAttrs attrs;
  attrs.axis = normalize_axis(axis, x.dim(), "index_select");
  Shape shape = x.shape();
  shape[attrs.axis] = index.numel();
  const Tensor in[2] = {x.detach(), index.reshape({-1})};
  Tensor out = empty(shape, x.dtype(), device);
  if (out.numel() > 0) detail::run_kernel(OpId::IndexSelect, device, in, std::span<Tensor>(&out, 1), attrs);
  if (autograd::needs_grad({&x})) {
    autograd::record("index_select", {x}, out, [shape = x.shape(), idx = in[1], axis = attrs.axis](const Tensor& g) {
      // Rows picked twice receive both gradients: scatter_add with the index spread over g.
      Shape ishape(static_cast<size_t>(g.dim()), 1);
      ishape[axis] = idx.numel();
      Tensor gx = zeros(shape, g.dtype(), g.device());
      scatter_add_(gx, axis, idx.reshape(ishape).expand(g.shape()), g);
      return std::vector<Tensor>{gx};
    });
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t axis, const Tensor& index) {
  detail::check_defined(x, "gather");
  detail::check_index_dtype(index, "gather");
  const Device device = detail::common_device({&x, &index}, "gather");
  TESSERA_CHECK(index.dim() == x.dim(), "gather", "index ", shape_str(index.shape()), " and input ",
                shape_str(x.shape()), " must have the same rank");
  OpAttrs attrs;
  attrs.axis = normalize_axis(axis, std::max<int64_t>(x.dim(), 1), "gather");
  for (int64_t d = 0; d < x.dim(); ++d) {
    TESSERA_CHECK(d == attrs.axis || index.size(d) <= x.size(d), "gather", "index ", shape_str(index.shape()),
                  " is larger than input ", shape_str(x.shape()), " outside axis ", attrs.axis);
  }
  const Tensor in[2] = {x.detach(), index};
  Tensor out = empty(index.shape(), x.dtype(), device);
  if (out.numel() > 0) detail::run_kernel(OpId::Gather, device, in, std::span<Tensor>(&out, 1), attrs);
  if (autograd::needs_grad({&x})) {
    autograd::record("gather", {x}, out, [shape = x.shape(), index, axis = attrs.axis](const Tensor& g) {
      Tensor gx = zeros(shape, g.dtype(), g.device());
      scatter_add_(gx, axis, index, g);
      return std::vector<Tensor>{gx};
    });
  }
  return out;
}

namespace {
// Checks a scatter of `src` into `x` along `axis` and runs `op` (scatter_add, scatter_reduce)
// on x in place.
void scatter_into(OpId op, Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, ScatterReduce reduce) {
  const char* name = op_name(op).data();
  detail::check_defined(x, name);
  detail::check_defined(src, name, "source");
  detail::check_index_dtype(index, name);
  const Device device = detail::common_device({&x, &index, &src}, name);
  TESSERA_CHECK(index.dim() == x.dim() && src.dim() == x.dim(), name, "input ", shape_str(x.shape()), ", index ",
                shape_str(index.shape()), " and source ", shape_str(src.shape()), " must have the same rank");
  OpAttrs attrs;
  attrs.axis = normalize_axis(axis, std::max<int64_t>(x.dim(), 1), name);
  attrs.reduce = reduce;
  for (int64_t d = 0; d < x.dim(); ++d) {
    TESSERA_CHECK(index.size(d) <= src.size(d) && (d == attrs.axis || index.size(d) <= x.size(d)), name, "index ",
                  shape_str(index.shape()), " does not fit source ", shape_str(src.shape()), " and input ", shape_str(x.shape()));
  }
  TESSERA_CHECK(x.dtype() != DType::boolean, name, "not supported for dtype bool");
  if (index.numel() == 0) return;
  // Only the index's extent of the source takes part, like PyTorch.
  Tensor part = src;
  for (int64_t d = 0; d < src.dim(); ++d) part = part.narrow(d, 0, index.size(d));
  if (op == OpId::ScatterReduce && x.dim() == 0) {  // the line kernels want an axis: a 0-d scatter as 1-d
    Tensor x1 = x.reshape({1});
    const Tensor in[2] = {index.reshape({1}), part.to(x.dtype()).reshape({1})};
    detail::run_kernel(op, device, in, std::span<Tensor>(&x1, 1), attrs);
    return;
  }
  // A device without atomic adds for x's dtype (16-bit floats, 8-bit integers) accumulates in a
  // wider copy: exact for the integers (addition wraps the same modulo 2^8), better rounded for
  // the floats.
  if (op == OpId::ScatterAdd) {
    const DType wide = is_floating(x.dtype()) ? DType::f32 : DType::i64;
    const Backend& backend = backend_for_device(device, name);
    if (!backend.supports(op, x.dtype()) && backend.supports(op, wide)) {
      const NoGradGuard no_grad;  // like the kernel call below: x is updated in place, unrecorded
      Tensor acc = x.to(wide);
      const Tensor in[2] = {index, part.to(wide)};
      detail::run_kernel(op, device, in, std::span<Tensor>(&acc, 1), attrs);
      x.copy_(acc);
      return;
    }
  }
  const Tensor in[2] = {index, part.to(x.dtype())};
  detail::run_kernel(op, device, in, std::span<Tensor>(&x, 1), attrs);
}
}  // namespace

Tensor& scatter_add_(Tensor& x, int64_t axis, const Tensor& index, const Tensor& src) {
  scatter_into(OpId::ScatterAdd, x, axis, index, src, ScatterReduce::sum);
  return x;
}

Tensor& scatter_reduce_(Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, ScatterReduce reduce) {
  TESSERA_CHECK(reduce == ScatterReduce::prod || reduce == ScatterReduce::amax || reduce == ScatterReduce::amin || reduce == ScatterReduce::sum,
                "scatter_reduce_", "in place takes sum, prod, amax or amin (mean needs the counts: use scatter_reduce)");
  if (reduce == ScatterReduce::sum) return scatter_add_(x, axis, index, src);
  scatter_into(OpId::ScatterReduce, x, axis, index, src, reduce);
  return x;
}

Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src) {
  detail::check_defined(x, "scatter_add");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x.clone();
    scatter_add_(out, axis, index, src);
  }
  if (autograd::needs_grad({&x, &src})) {
    autograd::record("scatter_add", {x, src}, out, [index, axis, src_shape = src.shape()](const Tensor& g) {
      // The source's gradient is gathered back; positions outside the index's extent get 0.
      Tensor gs = zeros(src_shape, g.dtype(), g.device());
      Tensor part = gs;
      for (int64_t d = 0; d < gs.dim(); ++d) part = part.narrow(d, 0, index.size(d));
      part.copy_(gather(g, axis, index));
      return std::vector<Tensor>{g, gs};
    });
  }
  return out;
}

Tensor take_along_axis(const Tensor& x, const Tensor& index, int64_t axis) {
  detail::check_defined(x, "take_along_axis");
  detail::check_index_dtype(index, "take_along_axis");
  TESSERA_CHECK(index.dim() == x.dim(), "take_along_axis", "index ", shape_str(index.shape()), " and input ",
                shape_str(x.shape()), " must have the same rank");
  axis = normalize_axis(axis, std::max<int64_t>(x.dim(), 1), "take_along_axis");
  Shape xs = x.shape(), is = index.shape();
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == axis) continue;
    TESSERA_CHECK(xs[d] == is[d] || xs[d] == 1 || is[d] == 1, "take_along_axis", "index ", shape_str(index.shape()),
                  " does not broadcast against input ", shape_str(x.shape()));
    xs[d] = is[d] = std::max(xs[d], is[d]);
  }
  return gather(x.expand(xs), axis, index.expand(is));
}

Tensor one_hot(const Tensor& labels, int64_t num_classes) {
  detail::check_index_dtype(labels, "one_hot", "labels");
  if (num_classes < 0) num_classes = labels.numel() ? amax(labels).item<int64_t>() + 1 : 0;
  if (labels.numel() > 0) {
    const int64_t lo = amin(labels).item<int64_t>(), hi = amax(labels).item<int64_t>();
    TESSERA_CHECK(lo >= 0 && hi < num_classes, "one_hot", "labels must lie in [0, ", num_classes, "), got range [",
                  lo, ", ", hi, "]");
  }
  Shape out_shape = labels.shape();
  out_shape.push_back(num_classes);
  checked_nbytes(out_shape, sizeof(int64_t), "one_hot");
  const Tensor classes = arange(num_classes, labels.dtype(), labels.device());
  return eq(labels.unsqueeze(-1), classes).to(DType::i64);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  detail::check_defined(weight, "embedding", "weight");
  detail::check_index_dtype(indices, "embedding", "indices");
  TESSERA_CHECK(weight.dim() == 2, "embedding", "weight must be 2-D [num, dim], got ", shape_str(weight.shape()));
  Shape shape = indices.shape();
  shape.push_back(weight.size(1));
  return index_select(weight, 0, indices.reshape({-1})).view(shape);
}

}  // namespace tessera
