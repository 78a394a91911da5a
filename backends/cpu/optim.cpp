// Fused optimizer updates: the core/kernels step functors over contiguous buffers.
#include <algorithm>
#include <vector>

#include "cpu_backend.h"
#include "tessera/kernels/optim.h"

TESSERA_CPU_KERNELS_BEGIN
namespace {

template <class T> struct Adam {
  void operator()(const KernelCall& c) {
    using C = compute_t<T>;
    const T* g = static_cast<const T*>(c.inputs[0].data_ptr());
    T* p = static_cast<T*>(c.outputs[0].data_ptr());
    T* m = static_cast<T*>(c.outputs[1].data_ptr());
    T* v = static_cast<T*>(c.outputs[2].data_ptr());
    const kernels::AdamStep<C> step(c.attrs.optim);
    parallel_for(c.outputs[0].numel(), kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        C pc = static_cast<C>(p[i]), mc = static_cast<C>(m[i]), vc = static_cast<C>(v[i]);
        step(pc, mc, vc, static_cast<C>(g[i]));
        p[i] = static_cast<T>(pc), m[i] = static_cast<T>(mc), v[i] = static_cast<T>(vc);
      }
    });
  }
};

template <class T> struct Sgd {
  void operator()(const KernelCall& c) {
    using C = compute_t<T>;
    const T* g = static_cast<const T*>(c.inputs[0].data_ptr());
    T* p = static_cast<T*>(c.outputs[0].data_ptr());
    T* buf = static_cast<T*>(c.outputs[1].data_ptr());
    const bool has_buf = c.attrs.optim.momentum != 0;
    const kernels::SgdStep<C> step(c.attrs.optim);
    parallel_for(c.outputs[0].numel(), kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        C pc = static_cast<C>(p[i]), bc = has_buf ? static_cast<C>(buf[i]) : C(0);
        step(pc, bc, static_cast<C>(g[i]));
        p[i] = static_cast<T>(pc);
        if (has_buf) buf[i] = static_cast<T>(bc);
      }
    });
  }
};
// One parallel pass over the concatenated elements of every tensor in the call.
template <class T> struct AdamMulti {
  void operator()(const KernelCall& c) {
    using C = compute_t<T>;
    const size_t k = c.inputs.size();
    std::vector<int64_t> start(k + 1, 0);
    for (size_t t = 0; t < k; ++t) start[t + 1] = start[t] + c.inputs[t].numel();
    const kernels::AdamStep<C> step(c.attrs.optim);
    parallel_for(start[k], kParallelGrain, [&](int64_t b, int64_t e) {
      size_t t = static_cast<size_t>(std::upper_bound(start.begin(), start.end(), b) - start.begin()) - 1;
      for (int64_t i = b; i < e; ++t) {
        const int64_t end = std::min(e, start[t + 1]), base = start[t];
        const T* g = static_cast<const T*>(c.inputs[t].data_ptr());
        T* p = static_cast<T*>(c.outputs[t].data_ptr());
        T* m = static_cast<T*>(c.outputs[k + t].data_ptr());
        T* v = static_cast<T*>(c.outputs[2 * k + t].data_ptr());
        for (; i < end; ++i) {
          const int64_t j = i - base;
          C pc = static_cast<C>(p[j]), mc = static_cast<C>(m[j]), vc = static_cast<C>(v[j]);
          step(pc, mc, vc, static_cast<C>(g[j]));
          p[j] = static_cast<T>(pc), m[j] = static_cast<T>(mc), v[j] = static_cast<T>(vc);
        }
      }
    });
  }
};
}  // namespace

void register_optim(KernelTable& table) {
  table[OpId::AdamMultiUpdate] = &float_dispatch<AdamMulti>;
  table[OpId::AdamUpdate] = &float_dispatch<Adam>;
  table[OpId::SgdUpdate] = &float_dispatch<Sgd>;
}

TESSERA_CPU_KERNELS_END
