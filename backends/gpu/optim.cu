// Fused optimizer updates: one grid-stride kernel per parameter over the core/kernels steps.
#include "../common/tensor_list.h"
#include "common.h"
#include "kernels.h"
#include "tessera/kernels/optim.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {
namespace {

template <class T>
TESSERA_GLOBAL void adam_kernel(int64_t n, T* p, T* m, T* v, const T* g, kernels::AdamStep<compute_t<T>> step) {
  using C = compute_t<T>;
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    C pc = static_cast<C>(p[i]), mc = static_cast<C>(m[i]), vc = static_cast<C>(v[i]);
    step(pc, mc, vc, static_cast<C>(g[i]));
    p[i] = static_cast<T>(pc);
    m[i] = static_cast<T>(mc);
    v[i] = static_cast<T>(vc);
  }
}

template <class T>
TESSERA_GLOBAL void sgd_kernel(int64_t n, T* p, T* buf, const T* g, kernels::SgdStep<compute_t<T>> step, bool has_buf) {
  using C = compute_t<T>;
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    C pc = static_cast<C>(p[i]), bc = has_buf ? static_cast<C>(buf[i]) : C(0);
    step(pc, bc, static_cast<C>(g[i]));
    p[i] = static_cast<T>(pc);
    if (has_buf) buf[i] = static_cast<T>(bc);
  }
}

// Multi-tensor Adam: each thread walks the list's concatenated index space (grid-stride), so a
// launch covers up to kMaxTensors parameters whatever their sizes.
template <class T>
TESSERA_GLOBAL void adam_multi_kernel(backend_common::AdamList<T> list, kernels::AdamStep<compute_t<T>> step) {
  using C = compute_t<T>;
  const int64_t total = list.start[list.count];
  for (int64_t i = global_index(); i < total; i += grid_stride()) {
    const int t = list.find(i);
    const int64_t j = i - list.start[t];
    C pc = static_cast<C>(list.p[t][j]), mc = static_cast<C>(list.m[t][j]), vc = static_cast<C>(list.v[t][j]);
    step(pc, mc, vc, static_cast<C>(list.g[t][j]));
    list.p[t][j] = static_cast<T>(pc);
    list.m[t][j] = static_cast<T>(mc);
    list.v[t][j] = static_cast<T>(vc);
  }
}

void adam_multi_op(const KernelCall& c) {
  const size_t k = c.inputs.size();
  backend_common::dispatch_float(c.outputs[0].dtype(), "adam_multi_update", [&]<class T>() {
    for (size_t first = 0; first < k; first += backend_common::kMaxTensors) {
      const auto list = backend_common::adam_list<T>(c, first);
      launch(adam_multi_kernel<T>, blocks_for(list.start[list.count]), Grid{kThreads}, 0, false, list,
             kernels::AdamStep<compute_t<T>>(c.attrs.optim));
    }
  });
}

void adam_op(const KernelCall& c) {
  const int64_t n = c.outputs[0].numel();
  backend_common::dispatch_float(c.outputs[0].dtype(), "adam_update", [&]<class T>() {
    launch(adam_kernel<T>, blocks_for(n), Grid{kThreads}, 0, false, n, ptr<T>(c.outputs[0]), ptr<T>(c.outputs[1]),
           ptr<T>(c.outputs[2]), ptr<const T>(c.inputs[0]), kernels::AdamStep<compute_t<T>>(c.attrs.optim));
  });
}

void sgd_op(const KernelCall& c) {
  const int64_t n = c.outputs[0].numel();
  backend_common::dispatch_float(c.outputs[0].dtype(), "sgd_update", [&]<class T>() {
    launch(sgd_kernel<T>, blocks_for(n), Grid{kThreads}, 0, false, n, ptr<T>(c.outputs[0]), ptr<T>(c.outputs[1]),
           ptr<const T>(c.inputs[0]), kernels::SgdStep<compute_t<T>>(c.attrs.optim), c.attrs.optim.momentum != 0);
  });
}
}  // namespace

void register_optim(KernelTable& table) {
  table[OpId::AdamUpdate] = &adam_op;
  table[OpId::AdamMultiUpdate] = &adam_multi_op;
  table[OpId::SgdUpdate] = &sgd_op;
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
