#pragma once
// Tensor: a handle (value semantics, cheap to copy) to a TensorImpl, which is a strided view
// of a ref-counted Storage. Copies of a Tensor share everything; views share the storage.
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "tessera/device.h"
#include "tessera/dtype.h"
#include "tessera/error.h"
#include "tessera/shape.h"
#include "tessera/storage.h"

namespace tessera {

struct AutogradMeta;  // owned by the autograd layer; null for plain tensors

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;      // in elements
  int64_t offset = 0;   // in elements, into storage
  DType dtype = DType::f32;
  std::shared_ptr<AutogradMeta> autograd;
};

class Tensor {
 public:
  /** An undefined tensor (defined() is false); most ops reject it. */
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Strides& strides() const { return impl().strides; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  /** Size of axis `axis` (negative counts from the end). */
  int64_t size(int64_t axis) const;
  int64_t stride(int64_t axis) const;
  int64_t numel() const { return tessera::numel(impl().shape); }
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  size_t itemsize() const { return tessera::itemsize(impl().dtype); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(); }
  bool is_contiguous() const;
  /** Pointer to the first element (device memory for device tensors). */
  void* data_ptr() const;
  /** Typed host pointer; throws unless dtype matches T and the memory is host-accessible. */
  template <class T> T* data() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  /** True when both tensors are the same handle (not merely equal values). */
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- views (share storage) ----
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor permute(const std::vector<int64_t>& order) const;
  Tensor transpose(int64_t a, int64_t b) const;
  /** Matrix transpose of the last two axes. */
  Tensor mT() const { return transpose(-2, -1); }
  Tensor slice(int64_t axis, int64_t start, int64_t stop, int64_t step = 1) const;
  Tensor narrow(int64_t axis, int64_t start, int64_t length) const;
  Tensor select(int64_t axis, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t axis) const;
  Tensor unsqueeze(int64_t axis) const;
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;

  // ---- copies and conversions ----
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype) const;
  /** The single element as T (any numeric T); throws unless numel() == 1. */
  template <class T> T item() const;
  /** All elements in row-major order, converted to T. */
  template <class T> std::vector<T> to_vector() const;

  // ---- in-place ----
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  /** Copies `src` (broadcast, cast, any device) into this tensor. */
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other);
  Tensor& sub_(const Tensor& other);
  Tensor& mul_(const Tensor& other);
  Tensor& div_(const Tensor& other);
  Tensor& add_(double other);
  Tensor& mul_(double other);

  // ---- autograd (see tessera/autograd.h) ----
  bool requires_grad() const;
  /** Marks a leaf as requiring grad (float dtypes only). Returns *this. */
  Tensor& set_requires_grad(bool on = true);
  /** Accumulated gradient (undefined until a backward pass reaches this tensor). */
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  /** True for tensors not produced by a recorded op. */
  bool is_leaf() const;
  /** Name of the op that produced this tensor ("" for leaves). */
  std::string grad_fn_name() const;
  /** Back-propagates from this tensor; `grad` defaults to 1 for a scalar. */
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  /** Same data, no history, requires_grad false. */
  Tensor detach() const;
  /** Calls `hook(grad)` when this tensor's gradient is computed; a defined result replaces it. */
  void register_hook(std::function<Tensor(const Tensor&)> hook) const;
  /** Leaves only: calls `hook(*this)` after each backward pass has added its gradient into
   *  .grad() (as torch's register_post_accumulate_grad_hook): the hook may read, move or clear
   *  .grad() (fully sharded training hands it to a reduce-scatter there). */
  void register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  /** Keeps .grad() of a non-leaf tensor after backward. */
  void retain_grad() const;

  // ---- method forms of common ops, as libtorch writes them (x.sum(1), x.softmax(-1), ...);
  // each is the free function of the same name (tensor_methods.cpp) ----
  Tensor sum() const;
  Tensor sum(int64_t axis, bool keepdim = false) const;
  Tensor sum(const std::vector<int64_t>& axes, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(int64_t axis, bool keepdim = false) const;
  Tensor mean(const std::vector<int64_t>& axes, bool keepdim = false) const;
  /** Largest / smallest element (a 0-d tensor), or along `axis` (values only: amax/amin). */
  Tensor max() const;
  Tensor min() const;
  Tensor amax(int64_t axis, bool keepdim = false) const;
  Tensor amin(int64_t axis, bool keepdim = false) const;
  Tensor argmax(int64_t axis, bool keepdim = false) const;
  Tensor softmax(int64_t axis) const;
  Tensor log_softmax(int64_t axis) const;
  Tensor matmul(const Tensor& other) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor neg() const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor pow(double exponent) const;
  Tensor clamp(double lo, double hi) const;

  /** PyTorch-style repr: tensor([[1., 2.], [3., 4.]], dtype=float64). */
  std::string str() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

namespace detail {
/** Makes a tensor over `storage` with the given geometry. */
Tensor make_tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset, DType dtype);
/** Reads element `linear_index` (row-major) of a host-accessible tensor as double. */
double read_element(const Tensor& t, int64_t linear_index);
}  // namespace detail

}  // namespace tessera
