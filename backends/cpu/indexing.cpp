// index_select, gather, scatter_add and scatter_reduce (prod, amax, amin). Indices are
// bounds-checked (the error names the op, the index and the axis size); the scatters parallelise
// only over positions that can never collide, so they are race-free and deterministic.
#include <cstring>

#include "../common/dtype_dispatch.h"
#include "line_plan.h"
#include "tessera/kernels/binary.h"

TESSERA_CPU_KERNELS_BEGIN
namespace {
using backend_common::for_range;
using backend_common::make_plan;

template <class I> int64_t checked(I raw, int64_t size, const char* op, int64_t axis) {
  const auto i = static_cast<int64_t>(raw);
  if (i < 0 || i >= size) {
    throw Error(detail::concat(op, ": index ", i, " is out of range for axis ", axis, " of size ", size));
  }
  return i;
}

template <class F> void dispatch_index(DType dt, F&& f) {
  if (dt == DType::i32) f.template operator()<int32_t>();
  else f.template operator()<int64_t>();
}

void index_select_kernel(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& index = c.inputs[1];
  Tensor& out = c.outputs[0];
  const int64_t axis = c.attrs.axis;
  dispatch_index(index.dtype(), [&]<class I>() {
    const I* idx = static_cast<const I*>(index.data_ptr());
    const int64_t istride = index.strides()[0];
    const int64_t n = out.shape()[axis], size = x.shape()[axis];
    for (int64_t j = 0; j < n; ++j) checked(idx[j * istride], size, "index_select", axis);
    // Copy one slice per index through the generic copy kernel's views.
    parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        Tensor dst = out.select(axis, j);
        const Tensor src = x.select(axis, static_cast<int64_t>(idx[j * istride]));
        const auto plan = make_plan<2>(dst.shape(), {&dst, &src});
        const size_t bytes = x.itemsize();
        for_range(plan, 0, plan.numel, [bytes](char* const* p, const int64_t* s, int64_t m) {
          for (int64_t i = 0; i < m; ++i) std::memcpy(p[0] + i * s[0], p[1] + i * s[1], bytes);
        });
      }
    });
  });
}

void gather_kernel(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& index = c.inputs[1];
  Tensor& out = c.outputs[0];
  const int64_t axis = c.attrs.axis;
  const int64_t size = x.dim() ? x.shape()[axis] : 1;
  const int64_t xstep = x.dim() ? x.strides()[axis] : 0;
  // Walk (out, index, x-with-axis-stride-0) together; the index supplies the axis offset.
  Strides xs = x.strides();
  if (x.dim()) xs[axis] = 0;
  const Strides& os = out.strides();
  const Strides& is = index.strides();
  const int64_t item = static_cast<int64_t>(x.itemsize());
  dispatch_index(index.dtype(), [&]<class I>() {
    const auto plan = make_plan<3>(out.shape(), {&os, &is, &xs},
                                   {static_cast<char*>(out.data_ptr()), static_cast<char*>(index.data_ptr()),
                                    static_cast<char*>(x.data_ptr())},
                                   {item, int64_t{sizeof(I)}, item});
    parallel_for(plan.numel, kParallelGrain, [&](int64_t b, int64_t e) {
      for_range(plan, b, e, [&](char* const* p, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t k = checked(*reinterpret_cast<const I*>(p[1] + i * s[1]), size, "gather", axis);
          std::memcpy(p[0] + i * s[0], p[2] + i * s[2] + k * xstep * item, static_cast<size_t>(item));
        }
      });
    });
  });
}

// x[.., index, ..] = Fn(x[.., index, ..], src) for every source element, in index order.
template <class Fn> void scatter_kernel(const KernelCall& c) {
  const Tensor& index = c.inputs[0];
  const Tensor& src = c.inputs[1];
  Tensor& x = c.outputs[0];
  const int64_t axis = c.attrs.axis;
  const int64_t size = x.dim() ? x.shape()[axis] : 1;
  const char* name = op_name(c.op).data();
  backend_common::dispatch_numeric(x.dtype(), name, [&]<class T>() {
    dispatch_index(index.dtype(), [&]<class I>() {
      // Lines along `axis` of index/src; each line writes only into its own line of x.
      const int64_t len = index.dim() ? index.shape()[axis] : 1;
      Shape outer = index.shape();
      Strides is = index.strides(), ss = src.strides(), xs = x.strides();
      if (index.dim()) {
        outer.erase(outer.begin() + axis);
        is.erase(is.begin() + axis);
        ss.erase(ss.begin() + axis);
        xs.erase(xs.begin() + axis);
      }
      const int64_t istep = index.dim() ? index.strides()[axis] * int64_t{sizeof(I)} : 0;
      const int64_t sstep = src.dim() ? src.strides()[axis] * int64_t{sizeof(T)} : 0;
      const int64_t xstep = x.dim() ? x.strides()[axis] * int64_t{sizeof(T)} : 0;
      const auto plan = make_plan<3>(outer, {&xs, &is, &ss},
                                     {static_cast<char*>(x.data_ptr()), static_cast<char*>(index.data_ptr()),
                                      static_cast<char*>(src.data_ptr())},
                                     {int64_t{sizeof(T)}, int64_t{sizeof(I)}, int64_t{sizeof(T)}});
      // Validate every index before writing anything, so a bad index leaves x untouched.
      for_range(plan, 0, plan.numel, [&](char* const* p, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = 0; j < len; ++j) checked(*reinterpret_cast<const I*>(p[1] + i * s[1] + j * istep), size, name, axis);
        }
      });
      parallel_for(plan.numel, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(len, 1)), [&](int64_t b, int64_t e) {
        for_range(plan, b, e, [&](char* const* p, const int64_t* s, int64_t n) {
          for (int64_t i = 0; i < n; ++i) {
            for (int64_t j = 0; j < len; ++j) {
              const int64_t k = static_cast<int64_t>(*reinterpret_cast<const I*>(p[1] + i * s[1] + j * istep));
              T* dst = reinterpret_cast<T*>(p[0] + i * s[0] + k * xstep);
              const T v = *reinterpret_cast<const T*>(p[2] + i * s[2] + j * sstep);
              *dst = static_cast<T>(Fn{}(static_cast<compute_t<T>>(*dst), static_cast<compute_t<T>>(v)));
            }
          }
        });
      });
    });
  });
}

void scatter_reduce_kernel(const KernelCall& c) {
  backend_common::dispatch_scatter_reduce(c.attrs.reduce, [&]<class Fn>() { scatter_kernel<Fn>(c); });
}
}  // namespace

void register_indexing(KernelTable& table) {
  table[OpId::IndexSelect] = &index_select_kernel;
  table[OpId::Gather] = &gather_kernel;
  table[OpId::ScatterAdd] = &scatter_kernel<kernels::AddFn>;
  table[OpId::ScatterReduce] = &scatter_reduce_kernel;
}

TESSERA_CPU_KERNELS_END
