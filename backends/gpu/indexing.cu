// index_select, gather (one thread per output element) and scatter_add (atomic adds:
// duplicate indices accumulate; the order of float additions is unspecified on real GPUs, so in
// deterministic mode a line kernel without atomics runs instead).
// Indices are validated on the device: an index out of range is reported through the device
// error slot (raised at the next host sync) and reads as 0; scatter_add validates every index
// in a first pass and its adds skip when any is bad, so the destination is left untouched.
// scatter_reduce (prod, amax, amin) always runs the line kernel: no atomics for those, and its
// products are then the same on every run.
#include "../common/index_views.h"
#include "common.h"
#include "kernels.h"
#include "tessera/ops/reduction.h"
#include "tessera/runtime.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {
namespace {
using backend_common::along_axis_view;
using backend_common::dispatch_index;
using backend_common::index_select_as_gather;

// out[i] = x[position of i with coordinate `axis` replaced by index[...]]; `ix` walks
// (out, index, x with its axis stride zeroed).
template <class T, class I>
TESSERA_GLOBAL void gather_kernel(int64_t n, T* out, const I* index, const T* x, int64_t x_axis_stride, int64_t size, Indexer<3> ix,
                                  DeviceErrorSlot* errors, int code, int64_t axis) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t o[3];
    ix.offsets(i, o);
    const int64_t k = static_cast<int64_t>(index[o[1]]);
    if (k < 0 || k >= size) {
      report_device_error(errors, code, kIndexOutOfRange, k, size, axis);
      out[o[0]] = T{};
    } else {
      out[o[0]] = x[o[2] + k * x_axis_stride];
    }
  }
}

template <class I>
TESSERA_GLOBAL void check_index_kernel(int64_t n, const I* index, int64_t size, Indexer<1> ix, DeviceErrorSlot* errors, int code, int64_t axis) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t o[1];
    ix.offsets(i, o);
    const int64_t k = static_cast<int64_t>(index[o[0]]);
    if (k < 0 || k >= size) report_device_error(errors, code, kIndexOutOfRange, k, size, axis);
  }
}

template <class T, class I>
TESSERA_GLOBAL void scatter_add_kernel(int64_t n, T* x, const I* index, const T* src, int64_t x_axis_stride, Indexer<3> ix,
                                       const DeviceErrorSlot* errors) {
  if (device_error_pending(errors)) return;
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t o[3];
    ix.offsets(i, o);
    atomic_add(x + o[0] + static_cast<int64_t>(index[o[1]]) * x_axis_stride, src[o[2]]);
  }
}

// Deterministic mode (tessera::set_deterministic): one thread per line -- the index positions
// along `axis` with the other coordinates fixed -- adding its sources in index order. Lines
// write disjoint destinations (they differ off the axis), so no atomics are needed and the sums
// are the same on every run, schedule and grid; the price is parallelism (one thread per line:
// 128 for a width-128 embedding's gradient, each walking every token).
template <class Fn, class T, class I>
TESSERA_GLOBAL void scatter_lines_kernel(int64_t lines, int64_t len, T* x, const I* index, const T* src, int64_t x_axis_stride,
                                         int64_t index_step, int64_t src_step, Indexer<3> ix, const DeviceErrorSlot* errors) {
  using C = compute_t<T>;
  if (device_error_pending(errors)) return;
  for (int64_t line = global_index(); line < lines; line += grid_stride()) {
    int64_t o[3];
    ix.offsets(line, o);
    for (int64_t i = 0; i < len; ++i) {
      T& dst = x[o[0] + static_cast<int64_t>(index[o[1] + i * index_step]) * x_axis_stride];
      dst = static_cast<T>(Fn{}(static_cast<C>(dst), static_cast<C>(src[o[2] + i * src_step])));
    }
  }
}

// gather with an explicit index tensor shaped like the output.
void gather_into(Tensor& out, const Tensor& x, const Tensor& index, int64_t axis, OpId op) {
  int64_t axis_stride = 0;
  const int64_t size = x.dim() ? x.size(axis) : 1;
  const Tensor xview = along_axis_view(x, out.shape(), axis, axis_stride);
  DeviceErrorSlot* errors = device_error_slot(out.device().index);
  backend_common::dispatch_all(x.dtype(), op_name(op).data(), [&]<class T>() {
    dispatch_index(index.dtype(), [&]<class I>() {
      launch(gather_kernel<T, I>, blocks_for(out.numel()), Grid{kThreads}, 0, false, out.numel(), ptr<T>(out), ptr<const I>(index),
             ptr<const T>(xview), axis_stride, size, make_indexer<3>(out.shape(), {&out, &index, &xview}), errors,
             device_error_code(op), axis);
    });
  });
}

void index_select_op(const KernelCall& c) {
  const Tensor idx = index_select_as_gather(c, /*check_on_host=*/false);
  gather_into(c.outputs[0], c.inputs[0], idx, c.attrs.axis, OpId::IndexSelect);
}

void gather_op(const KernelCall& c) { gather_into(c.outputs[0], c.inputs[0], c.inputs[1], c.attrs.axis, OpId::Gather); }

// Validates every index of a scatter into x (the scatter kernels then skip when one is bad).
void check_scatter_index(const KernelCall& c, const Tensor& x, const Tensor& index, DeviceErrorSlot* errors) {
  const int64_t axis = c.attrs.axis;
  dispatch_index(index.dtype(), [&]<class I>() {
    launch(check_index_kernel<I>, blocks_for(index.numel()), Grid{kThreads}, 0, false, index.numel(), ptr<const I>(index),
           x.dim() ? x.size(axis) : int64_t{1}, make_indexer<1>(index.shape(), {&index}), errors, device_error_code(c.op), axis);
  });
}

// One thread per line along the axis (index with that axis cut to 1), combining with Fn in
// index order. The front-end hands a 0-d scatter over as 1-d.
template <class Fn, class T>
void scatter_lines(const Tensor& xview, const Tensor& index, const Tensor& src, int64_t axis, int64_t axis_stride, DeviceErrorSlot* errors) {
  const int64_t len = index.size(axis);
  const Tensor xl = xview.narrow(axis, 0, 1), il = index.narrow(axis, 0, 1), sl = src.narrow(axis, 0, 1);
  dispatch_index(index.dtype(), [&]<class I>() {
    launch(scatter_lines_kernel<Fn, T, I>, blocks_for(il.numel()), Grid{kThreads}, 0, false, il.numel(), len, ptr<T>(xview),
           ptr<const I>(index), ptr<const T>(src), axis_stride, index.strides()[axis], src.strides()[axis],
           make_indexer<3>(il.shape(), {&xl, &il, &sl}), errors);
  });
}

void scatter_reduce_op(const KernelCall& c) {
  const Tensor& index = c.inputs[0];
  const Tensor& src = c.inputs[1];
  Tensor& x = c.outputs[0];
  if (index.numel() == 0) return;
  TESSERA_CHECK(index.dim() > 0, "scatter_reduce", "the kernel takes 1-d or higher tensors");
  int64_t axis_stride = 0;
  const Tensor xview = along_axis_view(x, index.shape(), c.attrs.axis, axis_stride);
  DeviceErrorSlot* errors = device_error_slot(x.device().index);
  check_scatter_index(c, x, index, errors);
  backend_common::dispatch_scatter_reduce(c.attrs.reduce, [&]<class Fn>() {
    backend_common::dispatch_numeric(x.dtype(), "scatter_reduce",
                                     [&]<class T>() { scatter_lines<Fn, T>(xview, index, src, c.attrs.axis, axis_stride, errors); });
  });
}

void scatter_add_op(const KernelCall& c) {
  const Tensor& index = c.inputs[0];
  const Tensor& src = c.inputs[1];
  Tensor& x = c.outputs[0];
  const int64_t axis = c.attrs.axis;
  if (index.numel() == 0) return;
  int64_t axis_stride = 0;
  const Tensor xview = along_axis_view(x, index.shape(), axis, axis_stride);
  DeviceErrorSlot* errors = device_error_slot(x.device().index);
  check_scatter_index(c, x, index, errors);
  if (deterministic() && index.dim() > 0) {
    auto lines = [&]<class T>() { scatter_lines<kernels::AddFn, T>(xview, index, src, axis, axis_stride, errors); };
    return backend_common::dispatch_scatter(x.dtype(), lines);
  }
  auto run = [&]<class T>() {
    dispatch_index(index.dtype(), [&]<class I>() {
      launch(scatter_add_kernel<T, I>, blocks_for(index.numel()), Grid{kThreads}, 0, false, index.numel(), ptr<T>(xview),
             ptr<const I>(index), ptr<const T>(src), axis_stride, make_indexer<3>(index.shape(), {&xview, &index, &src}), errors);
    });
  };
  backend_common::dispatch_scatter(x.dtype(), run);
}
}  // namespace

void register_indexing(KernelTable& table) {
  table[OpId::IndexSelect] = &index_select_op;
  table[OpId::Gather] = &gather_op;
  table[OpId::ScatterAdd] = &scatter_add_op;
  table.refuse(OpId::ScatterAdd, kNumericDTypes - backend_common::kScatterAddDTypes, backend_common::kScatterAddGap);
  table[OpId::ScatterReduce] = &scatter_reduce_op;
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
