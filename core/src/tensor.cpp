// Tensor geometry: views share storage and only rewrite shape/strides/offset.
#include "tessera/tensor.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "autograd/record.h"
#include "tessera/backend/registry.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"

namespace tessera {

namespace detail {
Tensor make_tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}
}  // namespace detail

namespace {
Tensor with_geometry(const Tensor& t, Shape shape, Strides strides, int64_t offset) {
  return detail::make_tensor(t.storage(), std::move(shape), std::move(strides), offset, t.dtype());
}

// Records a view op: the gradient of a view is the incoming gradient reshaped back, or
// written into the viewed region of a zero tensor of the base's shape.
Tensor record_view(const char* name, const Tensor& base, Tensor out, autograd::BackwardFn fn) {
  if (autograd::needs_grad({&base})) autograd::record(name, {base}, out, std::move(fn));
  return out;
}
autograd::BackwardFn reshape_back(const Shape& shape) {
  return [shape](const Tensor& g) { return std::vector<Tensor>{g.reshape(shape)}; };
}
template <class F> autograd::BackwardFn scatter_back(const Tensor& base, F region) {
  return [shape = base.shape(), dt = base.dtype(), dev = base.device(), region](const Tensor& g) {
    Tensor gx = zeros(shape, dt, dev);
    region(gx).copy_(g);
    return std::vector<Tensor>{gx};
  };
}

// Resolves one -1 and checks the element count.
Shape infer_shape(const Shape& requested, int64_t numel, const Shape& from, const char* op) {
  Shape shape = requested;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TESSERA_CHECK(infer < 0, op, "only one dimension can be -1 in ", shape_str(requested));
      infer = static_cast<int>(i);
    } else {
      TESSERA_CHECK(shape[i] >= 0, op, "invalid size ", shape[i], " in ", shape_str(requested));
      TESSERA_CHECK(!__builtin_mul_overflow(known, shape[i], &known), op, "cannot reshape ", shape_str(from), " into ",
                    shape_str(requested));
    }
  }
  if (infer >= 0) {
    TESSERA_CHECK(known != 0 && numel % known == 0, op, "cannot reshape ", shape_str(from), " into ",
                  shape_str(requested));
    shape[infer] = numel / known;
  }
  TESSERA_CHECK(numel == tessera::numel(shape), op, "cannot reshape ", shape_str(from), " (", numel,
                " elements) into ", shape_str(requested));
  return shape;
}

// Strides that let `shape` view memory laid out as (old_shape, old_strides), if any exist
// (the same rule as PyTorch's computeStride: split/merge only within contiguous chunks).
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& shape) {
  if (old_shape.empty() || numel(old_shape) == 0) return contiguous_strides(shape);
  Strides strides(shape.size());
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base = old_strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}
}  // namespace

TensorImpl& Tensor::impl() const {
  if (!impl_) throw Error("tensor: operation on an undefined tensor");
  return *impl_;
}

int64_t Tensor::size(int64_t axis) const {
  TESSERA_CHECK(dim() > 0, "size", "a 0-d tensor has no axis ", axis);
  return shape()[normalize_axis(axis, dim(), "size")];
}
int64_t Tensor::stride(int64_t axis) const {
  TESSERA_CHECK(dim() > 0, "stride", "a 0-d tensor has no axis ", axis);
  return strides()[normalize_axis(axis, dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;
    if (strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

void* Tensor::data_ptr() const {
  TESSERA_CHECK(!storage()->released(), "tensor", "the storage of this ", shape_str(shape()), " ", dtype(), " tensor on ", device().str(),
                " was released (a fully sharded parameter read outside its module's forward or backward: call the module through "
                "operator() or Module::call so its parameters are gathered)");
  return static_cast<char*>(storage()->data()) + offset() * static_cast<int64_t>(itemsize());
}

template <class T> T* Tensor::data() const {
  TESSERA_CHECK(dtype() == dtype_of_v<T>, "data", "tensor has dtype ", dtype(), ", requested ", dtype_of_v<T>);
  TESSERA_CHECK(backend_for(device().type).host_accessible(), "data", "tensor on ", device().str(),
                " is not host-accessible; use to(kCPU) first");
  return static_cast<T*>(data_ptr());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template Half* Tensor::data<Half>() const;
template BFloat16* Tensor::data<BFloat16>() const;
template int8_t* Tensor::data<int8_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;
template int32_t* Tensor::data<int32_t>() const;
template int64_t* Tensor::data<int64_t>() const;
template bool* Tensor::data<bool>() const;

Tensor Tensor::view(const Shape& requested) const {
  const Shape shape = infer_shape(requested, numel(), this->shape(), "view");
  auto strides = view_strides(this->shape(), this->strides(), shape);
  TESSERA_CHECK(strides.has_value(), "view", "shape ", shape_str(shape), " is incompatible with the strides of a ",
                shape_str(this->shape()), " tensor (use reshape, which copies)");
  return record_view("view", *this, with_geometry(*this, shape, *strides, offset()), reshape_back(this->shape()));
}

Tensor Tensor::reshape(const Shape& requested) const {
  const Shape shape = infer_shape(requested, numel(), this->shape(), "reshape");
  if (auto strides = view_strides(this->shape(), this->strides(), shape)) {
    return record_view("reshape", *this, with_geometry(*this, shape, *strides, offset()), reshape_back(this->shape()));
  }
  return contiguous().view(shape);
}

Tensor Tensor::permute(const std::vector<int64_t>& order) const {
  TESSERA_CHECK(static_cast<int64_t>(order.size()) == dim(), "permute", "order has ", order.size(),
                " axes for a tensor of rank ", dim());
  Shape shape(order.size());
  Strides strides(order.size());
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t a = normalize_axis(order[i], dim(), "permute");
    TESSERA_CHECK(!seen[a], "permute", "axis ", order[i], " repeated");
    seen[a] = true;
    shape[i] = this->shape()[a];
    strides[i] = this->strides()[a];
  }
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[normalize_axis(order[i], dim(), "permute")] = static_cast<int64_t>(i);
  return record_view("permute", *this, with_geometry(*this, shape, strides, offset()),
                     [inverse](const Tensor& g) { return std::vector<Tensor>{g.permute(inverse)}; });
}

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  std::vector<int64_t> order(dim());
  std::iota(order.begin(), order.end(), 0);
  if (dim() == 0) return *this;
  std::swap(order[normalize_axis(a, dim(), "transpose")], order[normalize_axis(b, dim(), "transpose")]);
  return permute(order);
}

Tensor Tensor::slice(int64_t axis, int64_t start, int64_t stop, int64_t step) const {
  TESSERA_CHECK(dim() > 0, "slice", "cannot slice a 0-d tensor");
  axis = normalize_axis(axis, dim(), "slice");
  TESSERA_CHECK(step > 0, "slice", "step must be positive, got ", step);
  const int64_t n = shape()[axis];
  auto clampi = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  start = clampi(start);
  stop = std::max(clampi(stop), start);
  Shape shape = this->shape();
  Strides strides = this->strides();
  shape[axis] = stop == start ? 0 : 1 + (stop - start - 1) / step;  // no overflow for a huge step
  if (shape[axis] > 1) {
    TESSERA_CHECK(!__builtin_mul_overflow(strides[axis], step, &strides[axis]), "slice", "step ", step,
                  " overflows the stride of axis ", axis);
  }
  return record_view("slice", *this, with_geometry(*this, shape, strides, offset() + start * this->strides()[axis]),
                     scatter_back(*this, [=](const Tensor& gx) { return gx.slice(axis, start, stop, step); }));
}

Tensor Tensor::narrow(int64_t axis, int64_t start, int64_t length) const {
  TESSERA_CHECK(dim() > 0, "narrow", "cannot narrow a 0-d tensor");
  axis = normalize_axis(axis, dim(), "narrow");
  const int64_t n = shape()[axis];
  if (start < 0) start += n;
  // Written so that no sum can overflow: start + length may not fit in int64_t.
  TESSERA_CHECK(start >= 0 && length >= 0 && start <= n && length <= n - start, "narrow", "range [", start, ", ",
                length <= INT64_MAX - std::max<int64_t>(start, 0) ? std::to_string(start + length) : "+" + std::to_string(length),
                ") out of bounds for axis ", axis, " of size ", n);
  Shape shape = this->shape();
  shape[axis] = length;
  return record_view("narrow", *this, with_geometry(*this, shape, strides(), offset() + start * strides()[axis]),
                     scatter_back(*this, [=](const Tensor& gx) { return gx.narrow(axis, start, length); }));
}

Tensor Tensor::select(int64_t axis, int64_t index) const {
  TESSERA_CHECK(dim() > 0, "select", "cannot select from a 0-d tensor");
  axis = normalize_axis(axis, dim(), "select");
  const int64_t n = shape()[axis];
  TESSERA_CHECK(index >= -n && index < n, "select", "index ", index, " out of range for axis ", axis, " of size ", n);
  if (index < 0) index += n;
  Shape shape = this->shape();
  Strides strides = this->strides();
  const int64_t off = offset() + index * strides[axis];
  shape.erase(shape.begin() + axis);
  strides.erase(strides.begin() + axis);
  return record_view("select", *this, with_geometry(*this, shape, strides, off),
                     scatter_back(*this, [=](const Tensor& gx) { return gx.select(axis, index); }));
}

Tensor Tensor::expand(const Shape& target) const {
  TESSERA_CHECK(target.size() >= shape().size(), "expand", "cannot expand ", shape_str(shape()), " to fewer axes ",
                shape_str(target));
  const size_t lead = target.size() - shape().size();
  Shape shape(target.size());
  Strides strides(target.size(), 0);
  for (size_t i = 0; i < target.size(); ++i) {
    if (i < lead) {
      TESSERA_CHECK(target[i] >= 0, "expand", "invalid size ", target[i], " in ", shape_str(target));
      shape[i] = target[i];
      continue;
    }
    const int64_t have = this->shape()[i - lead];
    const int64_t want = target[i] == -1 ? have : target[i];
    TESSERA_CHECK(have == want || have == 1, "expand", "cannot expand ", shape_str(this->shape()), " to ",
                  shape_str(target));
    shape[i] = want;
    strides[i] = have == want ? this->strides()[i - lead] : 0;
  }
  checked_numel(shape, "expand");
  // The engine sums incoming gradients down to the base's shape.
  return record_view("expand", *this, with_geometry(*this, shape, strides, offset()),
                     [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor Tensor::squeeze() const {
  Shape shape;
  Strides strides;
  for (int64_t d = 0; d < dim(); ++d) {
    if (this->shape()[d] != 1) {
      shape.push_back(this->shape()[d]);
      strides.push_back(this->strides()[d]);
    }
  }
  return record_view("squeeze", *this, with_geometry(*this, shape, strides, offset()), reshape_back(this->shape()));
}

Tensor Tensor::squeeze(int64_t axis) const {
  if (dim() == 0) return *this;
  axis = normalize_axis(axis, dim(), "squeeze");
  if (shape()[axis] != 1) return *this;  // like PyTorch: squeezing a non-1 axis is a no-op
  Shape shape = this->shape();
  Strides strides = this->strides();
  shape.erase(shape.begin() + axis);
  strides.erase(strides.begin() + axis);
  return record_view("squeeze", *this, with_geometry(*this, shape, strides, offset()), reshape_back(this->shape()));
}

Tensor Tensor::unsqueeze(int64_t axis) const {
  axis = normalize_axis(axis, dim() + 1, "unsqueeze");
  Shape shape = this->shape();
  Strides strides = this->strides();
  const int64_t stride = axis < dim() ? strides[axis] * shape[axis] : 1;
  shape.insert(shape.begin() + axis, 1);
  strides.insert(strides.begin() + axis, stride);
  return record_view("unsqueeze", *this, with_geometry(*this, shape, strides, offset()), reshape_back(this->shape()));
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = normalize_axis(start, dim(), "flatten");
  end = normalize_axis(end, dim(), "flatten");
  TESSERA_CHECK(start <= end, "flatten", "start axis ", start, " is after end axis ", end);
  Shape shape(this->shape().begin(), this->shape().begin() + start);
  int64_t merged = 1;
  for (int64_t d = start; d <= end; ++d) merged *= this->shape()[d];
  shape.push_back(merged);
  shape.insert(shape.end(), this->shape().begin() + end + 1, this->shape().end());
  return reshape(shape);
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  {
    NoGradGuard no_grad;
    out.copy_(*this);
  }
  return record_view("clone", *this, out, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor out = empty(shape(), dtype(), device);
  {
    NoGradGuard no_grad;
    out.copy_(*this);
  }
  return record_view("to", *this, out, [from = this->device()](const Tensor& g) { return std::vector<Tensor>{g.to(from)}; });
}

Tensor Tensor::to(DType dtype) const { return dtype == this->dtype() ? *this : cast(*this, dtype); }
Tensor Tensor::to(Device device, DType dtype) const { return to(dtype).to(device); }

template <class T> T Tensor::item() const {
  TESSERA_CHECK(numel() == 1, "item", "expected a tensor with one element, got shape ", shape_str(shape()));
  const Tensor host = to(kCPU);
  return static_cast<T>(detail::read_element(host, 0));
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int32_t Tensor::item<int32_t>() const;
template int64_t Tensor::item<int64_t>() const;
template bool Tensor::item<bool>() const;

template <class T> std::vector<T> Tensor::to_vector() const {
  const Tensor host = to(kCPU).to(dtype_of_v<T>).contiguous();
  const T* p = host.data<T>();
  return std::vector<T>(p, p + host.numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<Half> Tensor::to_vector<Half>() const;
template std::vector<BFloat16> Tensor::to_vector<BFloat16>() const;
template std::vector<int8_t> Tensor::to_vector<int8_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;

namespace {
// The in-place arithmetic ops are copy_ of their result: check first, so that the error names
// the op the user called (x.add_(1.0) on a leaf that requires grad used to report "copy_: ...").
const Tensor& inplace_target(const Tensor& self, const Tensor* other, const char* op) {
  TESSERA_CHECK(self.defined(), op, "undefined tensor");
  TESSERA_CHECK(!grad_enabled() || (!self.requires_grad() && !(other && other->defined() && other->requires_grad())), op,
                "in-place ops on tensors that require grad are not recorded; run them under NoGradGuard (optimizer updates) or use "
                "out-of-place ops");
  return self;
}
}  // namespace

Tensor& Tensor::add_(const Tensor& other) { return copy_(add(inplace_target(*this, &other, "add_"), other)); }
Tensor& Tensor::sub_(const Tensor& other) { return copy_(sub(inplace_target(*this, &other, "sub_"), other)); }
Tensor& Tensor::mul_(const Tensor& other) { return copy_(mul(inplace_target(*this, &other, "mul_"), other)); }
Tensor& Tensor::div_(const Tensor& other) { return copy_(div(inplace_target(*this, &other, "div_"), other)); }
Tensor& Tensor::add_(double other) { return copy_(add(inplace_target(*this, nullptr, "add_"), Scalar(other))); }
Tensor& Tensor::mul_(double other) { return copy_(mul(inplace_target(*this, nullptr, "mul_"), Scalar(other))); }

}  // namespace tessera
