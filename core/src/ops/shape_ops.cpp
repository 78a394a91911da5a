#include "tessera/ops/shape_ops.h"

#include "autograd/record.h"
#include "dispatch.h"
#include "tessera/ops/creation.h"

namespace tessera {

Tensor cat(const std::vector<Tensor>& tensors, int64_t axis) {
  TESSERA_CHECK(!tensors.empty(), "cat", "expected at least one tensor");
  for (const Tensor& t : tensors) detail::check_defined(t, "cat");
  const Tensor& first = tensors.front();
  TESSERA_CHECK(first.dim() > 0, "cat", "cannot concatenate 0-d tensors (use stack)");
  axis = normalize_axis(axis, first.dim(), "cat");
  Shape shape = first.shape();
  DType dtype = first.dtype();
  shape[axis] = 0;
  for (const Tensor& t : tensors) {
    TESSERA_CHECK(t.device() == first.device(), "cat", "expected all tensors on one device, got ",
                  first.device().str(), " and ", t.device().str());
    bool match = t.dim() == first.dim();
    for (int64_t d = 0; match && d < t.dim(); ++d) match = d == axis || t.size(d) == first.size(d);
    TESSERA_CHECK(match, "cat", "shapes ", shape_str(first.shape()), " and ", shape_str(t.shape()),
                  " differ outside axis ", axis);
    shape[axis] += t.size(axis);
    dtype = promote_types(dtype, t.dtype());
  }
  Tensor out = empty(shape, dtype, first.device());
  bool rec = false;
  {
    NoGradGuard no_grad;
    int64_t offset = 0;
    for (const Tensor& t : tensors) {
      out.narrow(axis, offset, t.size(axis)).copy_(t);
      offset += t.size(axis);
    }
  }
  for (const Tensor& t : tensors) rec = rec || autograd::needs_grad({&t});
  if (rec) {
    std::vector<int64_t> sizes;
    for (const Tensor& t : tensors) sizes.push_back(t.size(axis));
    autograd::record("cat", tensors, out, [sizes, axis](const Tensor& g) { return split(g, sizes, axis); });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t axis) {
  TESSERA_CHECK(!tensors.empty(), "stack", "expected at least one tensor");
  std::vector<Tensor> expanded;
  for (const Tensor& t : tensors) {
    detail::check_defined(t, "stack");
    TESSERA_CHECK(t.shape() == tensors.front().shape(), "stack", "shapes ", shape_str(tensors.front().shape()),
                  " and ", shape_str(t.shape()), " differ");
    expanded.push_back(t.unsqueeze(normalize_axis(axis, t.dim() + 1, "stack")));
  }
  return cat(expanded, axis < 0 ? axis + tensors.front().dim() + 1 : axis);
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t axis) {
  detail::check_defined(x, "split");
  TESSERA_CHECK(size > 0, "split", "size must be positive, got ", size);
  TESSERA_CHECK(x.dim() > 0, "split", "cannot split a 0-d tensor");
  axis = normalize_axis(axis, x.dim(), "split");
  std::vector<Tensor> out;
  const int64_t n = x.size(axis);
  for (int64_t start = 0; start < n;) {  // no start + size: it may overflow
    const int64_t len = std::min(size, n - start);
    out.push_back(x.narrow(axis, start, len));
    start += len;
  }
  if (n == 0) out.push_back(x);
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis) {
  detail::check_defined(x, "split");
  TESSERA_CHECK(x.dim() > 0, "split", "cannot split a 0-d tensor");
  axis = normalize_axis(axis, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    TESSERA_CHECK(s >= 0, "split", "negative size in ", shape_str(sizes));
    TESSERA_CHECK(!__builtin_add_overflow(total, s, &total), "split", "sizes ", shape_str(sizes), " overflow int64");
  }
  TESSERA_CHECK(total == x.size(axis), "split", "sizes ", shape_str(sizes), " sum to ", total, ", axis ", axis,
                " has size ", x.size(axis));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(axis, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis) {
  detail::check_defined(x, "chunk");
  TESSERA_CHECK(chunks > 0, "chunk", "chunks must be positive, got ", chunks);
  TESSERA_CHECK(x.dim() > 0, "chunk", "cannot chunk a 0-d tensor");
  const int64_t n = x.size(normalize_axis(axis, x.dim(), "chunk"));
  return split(x, std::max<int64_t>(n / chunks + (n % chunks != 0), 1), axis);
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  detail::check_defined(x, "broadcast_to");
  return x.expand(shape);
}

}  // namespace tessera
