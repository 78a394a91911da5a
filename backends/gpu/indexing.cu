// index_select, gather (one thread per output element, bounds-checked on the host first) and
// scatter_add (atomic adds: duplicate indices accumulate; the order of float additions is
// unspecified on real GPUs).
#include "../common/index_views.h"
#include "common.h"
#include "kernels.h"
#include "tessera/ops/reduction.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {
namespace {
using backend_common::along_axis_view;
using backend_common::check_bounds;
using backend_common::dispatch_index;
using backend_common::index_select_as_gather;

// out[i] = x[position of i with coordinate `axis` replaced by index[...]]; `ix` walks
// (out, index, x with its axis stride zeroed).
template <class T, class I>
TESSERA_GLOBAL void gather_kernel(int64_t n, T* out, const I* index, const T* x, int64_t x_axis_stride, Indexer<3> ix) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t o[3];
    ix.offsets(i, o);
    out[o[0]] = x[o[2] + static_cast<int64_t>(index[o[1]]) * x_axis_stride];
  }
}

template <class T, class I>
TESSERA_GLOBAL void scatter_add_kernel(int64_t n, T* x, const I* index, const T* src, int64_t x_axis_stride, Indexer<3> ix) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t o[3];
    ix.offsets(i, o);
    atomic_add(x + o[0] + static_cast<int64_t>(index[o[1]]) * x_axis_stride, src[o[2]]);
  }
}

// gather with an explicit index tensor shaped like the output.
void gather_into(Tensor& out, const Tensor& x, const Tensor& index, int64_t axis, const char* op, bool checked) {
  if (!checked) check_bounds(index, x.dim() ? x.size(axis) : 1, op, axis);
  int64_t axis_stride = 0;
  const Tensor xview = along_axis_view(x, out.shape(), axis, axis_stride);
  backend_common::dispatch_all(x.dtype(), op, [&]<class T>() {
    dispatch_index(index.dtype(), [&]<class I>() {
      launch(gather_kernel<T, I>, blocks_for(out.numel()), Grid{kThreads}, 0, false, out.numel(), ptr<T>(out), ptr<const I>(index),
             ptr<const T>(xview), axis_stride, make_indexer<3>(out.shape(), {&out, &index, &xview}));
    });
  });
}

void index_select_op(const KernelCall& c) {
  const Tensor idx = index_select_as_gather(c);
  gather_into(c.outputs[0], c.inputs[0], idx, c.attrs.axis, "index_select", true);
}

void gather_op(const KernelCall& c) { gather_into(c.outputs[0], c.inputs[0], c.inputs[1], c.attrs.axis, "gather", false); }

void scatter_add_op(const KernelCall& c) {
  const Tensor& index = c.inputs[0];
  const Tensor& src = c.inputs[1];
  Tensor& x = c.outputs[0];
  const int64_t axis = c.attrs.axis;
  check_bounds(index, x.dim() ? x.size(axis) : 1, "scatter_add", axis);
  int64_t axis_stride = 0;
  const Tensor xview = along_axis_view(x, index.shape(), axis, axis_stride);
  auto run = [&]<class T>() {
    dispatch_index(index.dtype(), [&]<class I>() {
      launch(scatter_add_kernel<T, I>, blocks_for(index.numel()), Grid{kThreads}, 0, false, index.numel(), ptr<T>(xview),
             ptr<const I>(index), ptr<const T>(src), axis_stride, make_indexer<3>(index.shape(), {&xview, &index, &src}));
    });
  };
  backend_common::dispatch_scatter(x.dtype(), run);
}
}  // namespace

void register_indexing(KernelTable& table) {
  table[OpId::IndexSelect] = &index_select_op;
  table[OpId::Gather] = &gather_op;
  table[OpId::ScatterAdd] = &scatter_add_op;
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
