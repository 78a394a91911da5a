// Fused optimizer updates: one grid-stride kernel per parameter over the core/kernels steps.
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
  table[OpId::SgdUpdate] = &sgd_op;
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
