// Copy (strided gather/scatter with dtype conversion) and fill kernels.
#include <cstring>

#include "../common/dtype_dispatch.h"
#include "../common/strided_loop.h"
#include "cpu_backend.h"
#include "tessera/kernels/convert.h"

TESSERA_CPU_KERNELS_BEGIN
namespace {
using backend_common::for_range;
using backend_common::make_plan;

template <class D, class S> void copy_loop(const Tensor& src, Tensor& dst) {
  const auto plan = make_plan<2>(dst.shape(), {&dst, &src});
  parallel_for(plan.numel, kParallelGrain, [&](int64_t b, int64_t e) {
    for_range(plan, b, e, [](char* const* p, const int64_t* s, int64_t n) {
      if constexpr (std::is_same_v<D, S>) {
        if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
          std::memcpy(p[0], p[1], static_cast<size_t>(n) * sizeof(D));
          return;
        }
      }
      if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
        D* o = reinterpret_cast<D*>(p[0]);
        const S* a = reinterpret_cast<const S*>(p[1]);
        for (int64_t i = 0; i < n; ++i) o[i] = kernels::convert<D, S>(a[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          *reinterpret_cast<D*>(p[0] + i * s[0]) =
              kernels::convert<D, S>(*reinterpret_cast<const S*>(p[1] + i * s[1]));
        }
      }
    });
  });
}

void copy_kernel(const KernelCall& c) {
  const Tensor& src = c.inputs[0];
  Tensor& dst = c.outputs[0];
  backend_common::dispatch_all(dst.dtype(), "copy", [&]<class D>() {
    backend_common::dispatch_all(src.dtype(), "copy", [&]<class S>() { copy_loop<D, S>(src, dst); });
  });
}

void fill_kernel(const KernelCall& c) {
  Tensor& dst = c.outputs[0];
  backend_common::dispatch_all(dst.dtype(), "fill", [&]<class T>() {
    const T value = kernels::from_double<T>(c.attrs.value);
    const auto plan = make_plan<1>(dst.shape(), {&dst});
    parallel_for(plan.numel, kParallelGrain, [&](int64_t b, int64_t e) {
      for_range(plan, b, e, [value](char* const* p, const int64_t* s, int64_t n) {
        if (s[0] == sizeof(T)) {
          T* o = reinterpret_cast<T*>(p[0]);
          for (int64_t i = 0; i < n; ++i) o[i] = value;
        } else {
          for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = value;
        }
      });
    });
  });
}
}  // namespace

void register_copy_fill(KernelTable& table) {
  table[OpId::Copy] = &copy_kernel;
  table[OpId::Fill] = &fill_kernel;
}

TESSERA_CPU_KERNELS_END
