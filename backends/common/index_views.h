#pragma once
// Host-side preparation shared by the device backends' indexing kernels: bounds checks with
// the op's error message, index dtype dispatch, and the strided views a gather/scatter kernel
// walks (x with its indexed axis' stride zeroed, so one indexer serves every operand).
#include "tessera/backend/kernel.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduction.h"
#include "tessera/tensor.h"

namespace tessera::backend_common {

// Throws "<op>: index i is out of range for axis a of size s" before any kernel runs.
inline void check_bounds(const Tensor& index, int64_t size, const char* op, int64_t axis) {
  if (index.numel() == 0) return;
  const int64_t lo = amin(index).item<int64_t>(), hi = amax(index).item<int64_t>();
  const int64_t bad = lo < 0 ? lo : hi;
  if (lo < 0 || hi >= size) {
    throw Error(detail::concat(op, ": index ", bad, " is out of range for axis ", axis, " of size ", size));
  }
}

/** cross_entropy's targets: each in [0, classes) or equal to `ignore`; checked on the device, one small read back. */
inline void check_class_targets(const Tensor& target, int64_t classes, int64_t ignore) {
  const Tensor valid = logical_or(eq(target, ignore), logical_and(ge(target, 0), lt(target, classes)));
  if (all(valid).item<bool>()) return;
  const int64_t at = argmin(valid.to(DType::i32)).item<int64_t>();
  const int64_t t = target.select(0, at).item<int64_t>();
  throw Error(detail::concat("cross_entropy: target ", t, " at position ", at, " is out of range for ", classes, " classes"));
}

/** The dtypes scatter_add's device kernels take: those with native atomic adds everywhere (the
 *  backends declare the rest refused, so the dispatcher never hands them to dispatch_scatter). */
inline constexpr DTypeSet kScatterAddDTypes{DType::f32, DType::f64, DType::i32, DType::i64};
inline constexpr const char* kScatterAddGap = "no device atomics for them; scatter_add accumulates them in float32 or int64 and casts back";

/** scatter_add's destination dtypes on the device backends: kScatterAddDTypes. */
template <class F> void dispatch_scatter(DType dt, F&& f) {
  switch (dt) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f64: f.template operator()<double>(); return;
    case DType::i32: f.template operator()<int32_t>(); return;
    case DType::i64: f.template operator()<int64_t>(); return;
    default: throw Error(detail::concat("scatter_add: dtype ", dt, " is not supported by the device kernels"));
  }
}

template <class F> void dispatch_index(DType dt, F&& f) {
  if (dt == DType::i32) f.template operator()<int32_t>();
  else f.template operator()<int64_t>();
}

/** x seen with `shape`, its `axis` stride zeroed; `axis_stride` receives the original stride. */
inline Tensor along_axis_view(const Tensor& x, const Shape& shape, int64_t axis, int64_t& axis_stride) {
  Strides xs = x.strides();
  axis_stride = x.dim() ? xs[axis] : 0;
  if (x.dim()) xs[axis] = 0;
  return detail::make_tensor(x.storage(), shape, xs, x.offset(), x.dtype());
}

/** index_select's 1-D index broadcast to the output shape along `axis` (bounds checked here
 *  unless the caller's kernel checks them on the device). */
inline Tensor index_select_as_gather(const KernelCall& c, bool check_on_host = true) {
  const Tensor& out = c.outputs[0];
  const int64_t axis = c.attrs.axis;
  Strides istrides(static_cast<size_t>(out.dim()), 0);
  istrides[axis] = c.inputs[1].strides()[0];
  if (check_on_host) check_bounds(c.inputs[1], c.inputs[0].size(axis), "index_select", axis);
  return detail::make_tensor(c.inputs[1].storage(), out.shape(), istrides, c.inputs[1].offset(), c.inputs[1].dtype());
}

}  // namespace tessera::backend_common
