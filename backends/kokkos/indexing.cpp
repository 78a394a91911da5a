// index_select and gather (one iteration per output element, bounds checked on the host
// first) and scatter_add / scatter_reduce (one iteration per line along the axis:
// deterministic, no atomics).
#include "../common/index_views.h"
#include "common.h"

namespace tessera::kokkos {
namespace {
using backend_common::along_axis_view;
using backend_common::check_bounds;
using backend_common::dispatch_index;

// Kernel bodies are named templates: nvcc allows no device lambda inside a generic lambda.
template <class T, class I> void gather_impl(Tensor& out, const Tensor& index, const Tensor& xview, int64_t axis_stride, const char* op) {
  T* o = ptr<T>(out);
  const I* idx = ptr<const I>(index);
  const T* src = ptr<const T>(xview);
  const auto ix = make_indexer<3>(out.shape(), {&out, &index, &xview});
  for_n(op, out.numel(), KOKKOS_LAMBDA(int64_t i) {
    int64_t off[3];
    ix.offsets(i, off);
    o[off[0]] = src[off[2] + static_cast<int64_t>(idx[off[1]]) * axis_stride];
  });
}

void gather_into(Tensor& out, const Tensor& x, const Tensor& index, int64_t axis, const char* op, bool checked) {
  if (!checked) check_bounds(index, x.dim() ? x.size(axis) : 1, op, axis);
  int64_t axis_stride = 0;
  const Tensor xview = along_axis_view(x, out.shape(), axis, axis_stride);
  backend_common::dispatch_all(x.dtype(), op, [&]<class T>() {
    dispatch_index(index.dtype(), [&]<class I>() { gather_impl<T, I>(out, index, xview, axis_stride, op); });
  });
}

void index_select_op(const KernelCall& c) {
  const Tensor idx = backend_common::index_select_as_gather(c);
  gather_into(c.outputs[0], c.inputs[0], idx, c.attrs.axis, "index_select", true);
}

void gather_op(const KernelCall& c) { gather_into(c.outputs[0], c.inputs[0], c.inputs[1], c.attrs.axis, "gather", false); }

// Deterministic without atomics: a "line" is every index position along `axis` with the other
// coordinates fixed; lines write disjoint destinations (they differ off the axis), so each runs
// in parallel and adds its sources in index order, the same sums on every run and thread count.
template <class Fn, class T, class I>
void scatter_impl(const Tensor& xview, const Tensor& index, const Tensor& src, int64_t axis, int64_t axis_stride, const char* op) {
  using C = compute_t<T>;
  T* dst = ptr<T>(xview);
  const I* idx = ptr<const I>(index);
  const T* s = ptr<const T>(src);
  if (index.numel() == 0) return;
  if (index.dim() == 0) {
    for_n(op, 1, KOKKOS_LAMBDA(int64_t) {
      T& d = dst[static_cast<int64_t>(idx[0]) * axis_stride];
      d = static_cast<T>(Fn{}(static_cast<C>(d), static_cast<C>(s[0])));
    });
    return;
  }
  const int64_t len = index.size(axis), istep = index.strides()[axis], sstep = src.strides()[axis];
  const Tensor xl = xview.narrow(axis, 0, 1), il = index.narrow(axis, 0, 1), sl = src.narrow(axis, 0, 1);
  const auto ix = make_indexer<3>(il.shape(), {&xl, &il, &sl});
  for_n(
      op, il.numel(),
      KOKKOS_LAMBDA(int64_t line) {
        int64_t off[3];
        ix.offsets(line, off);
        for (int64_t i = 0; i < len; ++i) {
          T& d = dst[off[0] + static_cast<int64_t>(idx[off[1] + i * istep]) * axis_stride];
          d = static_cast<T>(Fn{}(static_cast<C>(d), static_cast<C>(s[off[2] + i * sstep])));
        }
      },
      len);
}

// Shared by scatter_add (Fn = AddFn, the dtypes with device atomics, as the other device
// backends) and scatter_reduce (every numeric dtype).
template <class Fn> void scatter_with(const KernelCall& c, bool every_numeric_dtype) {
  const Tensor& index = c.inputs[0];
  const Tensor& src = c.inputs[1];
  Tensor& x = c.outputs[0];
  const int64_t axis = c.attrs.axis;
  const char* op = op_name(c.op).data();
  check_bounds(index, x.dim() ? x.size(axis) : 1, op, axis);
  int64_t axis_stride = 0;
  const Tensor xview = along_axis_view(x, index.shape(), axis, axis_stride);
  auto run = [&]<class T>() {
    dispatch_index(index.dtype(), [&]<class I>() { scatter_impl<Fn, T, I>(xview, index, src, axis, axis_stride, op); });
  };
  if (every_numeric_dtype) backend_common::dispatch_numeric(x.dtype(), op, run);
  else backend_common::dispatch_scatter(x.dtype(), run);
}

void scatter_add_op(const KernelCall& c) { scatter_with<kernels::AddFn>(c, false); }
void scatter_reduce_op(const KernelCall& c) {
  backend_common::dispatch_scatter_reduce(c.attrs.reduce, [&]<class Fn>() { scatter_with<Fn>(c, true); });
}
}  // namespace

void register_indexing(KernelTable& table) {
  table[OpId::IndexSelect] = &index_select_op;
  table[OpId::Gather] = &gather_op;
  table[OpId::ScatterAdd] = &scatter_add_op;
  table.refuse(OpId::ScatterAdd, kNumericDTypes - backend_common::kScatterAddDTypes, backend_common::kScatterAddGap);
  table[OpId::ScatterReduce] = &scatter_reduce_op;
}

}  // namespace tessera::kokkos
