// index_put: x[indices...] = values (or += with accumulate), PyTorch's advanced-indexing
// assignment. The index tensors (one per leading axis, broadcast together) become one linear
// index over those axes; with accumulate the values go in through index_add (repeated
// positions add up), otherwise through scatter. Gradients come from those parts.
#include "dispatch.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/indexing.h"

namespace tessera {

Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate) {
  constexpr const char* op = "index_put";
  detail::check_defined(x, op);
  detail::check_defined(values, op, "values");
  TESSERA_CHECK(!indices.empty() && static_cast<int64_t>(indices.size()) <= x.dim(), op, "needs 1 to ", x.dim(), " index tensors for input ",
                shape_str(x.shape()), ", got ", indices.size());
  Shape index_shape;
  for (size_t i = 0; i < indices.size(); ++i) {
    detail::check_index_dtype(indices[i], op, "index");
    detail::common_device({&x, &indices[i], &values}, op);
    index_shape = i == 0 ? indices[i].shape() : broadcast_shapes(index_shape, indices[i].shape(), op);
  }
  const auto k = static_cast<int64_t>(indices.size());
  const Shape rest(x.shape().begin() + k, x.shape().end());
  int64_t lead = 1, inner = 1;
  for (int64_t a = 0; a < k; ++a) lead *= x.size(a);
  // The linear position over the first k axes (negative indices count from the end). An index
  // outside its axis makes the position -1, which the kernel below refuses as out of range: no
  // host read here (ops make no host sync, docs/gpu.md), and no silent landing on another row.
  Tensor linear = zeros(index_shape, DType::i64, x.device()), bad = zeros(index_shape, DType::boolean, x.device());
  for (int64_t a = 0; a < k; ++a) {
    const int64_t n = x.size(a);
    Tensor idx = indices[static_cast<size_t>(a)].to(DType::i64).expand(index_shape);
    bad = logical_or(bad, logical_or(lt(idx, -n), ge(idx, n)));
    idx = where(lt(idx, 0), add(idx, n), idx);
    linear = add(mul(linear, n), idx);
  }
  linear = where(bad, full(index_shape, -1.0, DType::i64, x.device()), linear);
  for (int64_t s : rest) inner *= s;
  Shape target = index_shape;
  target.insert(target.end(), rest.begin(), rest.end());
  const Tensor vals = values.to(x.dtype()).expand(broadcast_shapes(values.shape(), target, op)).reshape({-1, inner});
  TESSERA_CHECK(vals.size(0) == numel(index_shape), op, "values ", shape_str(values.shape()), " do not broadcast to the indexed shape ",
                shape_str(target));
  const Tensor flat = x.reshape({lead, inner}), pos = linear.reshape({-1});
  const Tensor out = accumulate ? index_add(flat, 0, pos, vals) : scatter(flat, 0, pos.unsqueeze(1).expand({pos.size(0), inner}), vals);
  return out.reshape(x.shape());
}

}  // namespace tessera
