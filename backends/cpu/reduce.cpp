// Reduction kernels (sum, prod, max, min over any axis set; argmax/argmin; cumsum).
// Determinism: the summation order depends only on the shape and strides — rows reduce with a
// fixed 8-lane pattern, full reductions split into fixed-size chunks merged in order, column
// reductions walk the reduced axes in order — never on how TBB splits the work.
#include <cmath>
#include <limits>
#include <vector>

#include "../common/dtype_dispatch.h"
#include "line_plan.h"
#include "tessera/kernels/convert.h"
#include "tessera/kernels/math.h"
#include "tessera/kernels/reduce.h"

TESSERA_CPU_KERNELS_BEGIN
namespace {
using backend_common::for_range;
using backend_common::make_plan;

template <class T> using SumR = kernels::SumReducer<T>;
template <class T> using ProdR = kernels::ProdReducer<T>;
template <class T> using MaxR = kernels::MaxReducer<T>;
template <class T> using MinR = kernels::MinReducer<T>;

constexpr int kLanes = 8;
constexpr int64_t kChunk = 16384;

// Max/min of contiguous floats: the shared reducer's sticky-NaN merge is a branch per element,
// which does not vectorise (row max ran at 6.6 GB/s). Here each lane keeps a plain select
// (NaN never wins it) and a NaN flag; any NaN makes the result NaN, as the merge would.
template <class R> inline constexpr int kExtremeFloat = 0;
template <> inline constexpr int kExtremeFloat<kernels::ExtremeReducer<float, true>> = 1;
template <> inline constexpr int kExtremeFloat<kernels::ExtremeReducer<float, false>> = -1;

template <bool kMax> float extreme_floats(const float* x, int64_t n) {
  // GCC vector types (8 lanes, native on AVX2): the scalar form of this loop is not vectorised
  // by the SLP pass (a float select and an int flag per lane).
  typedef float F8 __attribute__((vector_size(32)));
  typedef int32_t I8 __attribute__((vector_size(32)));
  static_assert(kLanes == 8);
  F8 acc;
  for (int l = 0; l < kLanes; ++l) acc[l] = kMax ? -INFINITY : INFINITY;
  I8 nan = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    F8 v;
    __builtin_memcpy(&v, x + i, sizeof v);
    acc = (kMax ? v > acc : v < acc) ? v : acc;
    nan |= v != v;
  }
  float total = acc[0];
  int32_t any_nan = nan[0];
  for (int l = 1; l < kLanes; ++l) {
    total = (kMax ? acc[l] > total : acc[l] < total) ? acc[l] : total;
    any_nan |= nan[l];
  }
  for (; i < n; ++i) {
    total = (kMax ? x[i] > total : x[i] < total) ? x[i] : total;
    any_nan |= static_cast<int32_t>(x[i] != x[i]);
  }
  return any_nan ? std::numeric_limits<float>::quiet_NaN() : total;
}

template <class R, class T> typename R::Acc reduce_run(const char* p, int64_t stride, int64_t n) {
  using Acc = typename R::Acc;
  if constexpr (kExtremeFloat<R> != 0) {
    if (stride == sizeof(float)) return extreme_floats<(kExtremeFloat<R> > 0)>(reinterpret_cast<const float*>(p), n);
  }
  Acc acc[kLanes];
  for (auto& a : acc) a = R::init();
  int64_t i = 0;
  if (stride == sizeof(T)) {
    const T* x = reinterpret_cast<const T*>(p);
    for (; i + kLanes <= n; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) acc[l] = R::step(acc[l], x[i + l]);
    }
    for (; i < n; ++i) acc[0] = R::step(acc[0], x[i]);
  } else {
    for (; i < n; ++i) acc[i % kLanes] = R::step(acc[i % kLanes], *reinterpret_cast<const T*>(p + i * stride));
  }
  Acc total = acc[0];
  for (int l = 1; l < kLanes; ++l) total = R::merge(total, acc[l]);
  return total;
}

// True when `shape` with `strides` (elements) is one dense row-major block.
bool dense(const Shape& shape, const Strides& strides) {
  if (numel(shape) == 0) return true;  // nothing is read
  int64_t expected = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

template <class R, class T> void reduce_tensor(const Tensor& x_in, Tensor& out, const std::vector<int64_t>& axes) {
  using Acc = typename R::Acc;
  Tensor x = x_in;
  Shape kshape, rshape;
  Strides kstr, rstr;
  auto split = [&] {
    kshape.clear(), rshape.clear(), kstr.clear(), rstr.clear();
    for (int64_t d = 0; d < x.dim(); ++d) {
      const bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
      (reduced ? rshape : kshape).push_back(x.shape()[d]);
      (reduced ? rstr : kstr).push_back(x.strides()[d]);
    }
  };
  split();
  const int64_t rows = numel(kshape), len = numel(rshape);
  T* o = static_cast<T*>(out.data_ptr());
  const bool rows_dense = dense(rshape, rstr);
  if (!rows_dense && rows > 1 && dense(kshape, kstr)) {
    // Column reduction: the kept block is dense, so walk the reduced positions in order and
    // accumulate whole contiguous columns at once.
    const auto rplan = make_plan<1>(rshape, {&rstr}, {static_cast<char*>(x.data_ptr())}, {int64_t{sizeof(T)}});
    constexpr int64_t kCols = 256;
    parallel_for((rows + kCols - 1) / kCols, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(len * kCols, 1)),
                 [&](int64_t b, int64_t e) {
                   Acc acc[kCols];
                   for (int64_t blk = b; blk < e; ++blk) {
                     const int64_t c0 = blk * kCols, nc = std::min(kCols, rows - c0);
                     for (int64_t j = 0; j < nc; ++j) acc[j] = R::init();
                     for_range(rplan, 0, len, [&](char* const* p, const int64_t* s, int64_t n) {
                       for (int64_t i = 0; i < n; ++i) {
                         const T* col = reinterpret_cast<const T*>(p[0] + i * s[0]) + c0;
                         for (int64_t j = 0; j < nc; ++j) acc[j] = R::step(acc[j], col[j]);
                       }
                     });
                     for (int64_t j = 0; j < nc; ++j) o[c0 + j] = R::finish(acc[j]);
                   }
                 });
    return;
  }
  if (!rows_dense) {
    std::vector<int64_t> order;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) order.push_back(d);
    }
    order.insert(order.end(), axes.begin(), axes.end());
    x = x.permute(order).contiguous();
    std::vector<int64_t> tail_axes;
    for (size_t i = order.size() - axes.size(); i < order.size(); ++i) tail_axes.push_back(static_cast<int64_t>(i));
    reduce_tensor<R, T>(x, out, tail_axes);
    return;
  }
  const int64_t step = sizeof(T);
  if (rows == 1) {
    const char* base = static_cast<const char*>(x.data_ptr());
    const int64_t chunks = std::max<int64_t>(1, (len + kChunk - 1) / kChunk);
    std::vector<Acc> partial(static_cast<size_t>(chunks));
    parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        partial[c] = reduce_run<R, T>(base + c * kChunk * step, step, std::min(kChunk, len - c * kChunk));
      }
    });
    Acc total = partial[0];
    for (int64_t c = 1; c < chunks; ++c) total = R::merge(total, partial[c]);
    o[0] = R::finish(total);
    return;
  }
  const Strides ostr = contiguous_strides(kshape);
  const auto kplan = make_plan<2>(kshape, {&ostr, &kstr}, {reinterpret_cast<char*>(o), static_cast<char*>(x.data_ptr())},
                                  {int64_t{sizeof(T)}, int64_t{sizeof(T)}});
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(len, 1)), [&](int64_t b, int64_t e) {
    for_range(kplan, b, e, [&](char* const* p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        *reinterpret_cast<T*>(p[0] + i * s[0]) = R::finish(reduce_run<R, T>(p[1] + i * s[1], step, len));
      }
    });
  });
}

template <template <class> class R> void reduce_kernel(const KernelCall& c) {
  backend_common::dispatch_numeric(c.inputs[0].dtype(), op_name(c.op).data(),
                                   [&]<class T>() { reduce_tensor<R<T>, T>(c.inputs[0], c.outputs[0], c.attrs.axes); });
}

template <template <class> class R> void extreme_kernel(const KernelCall& c) {
  backend_common::dispatch_all(c.inputs[0].dtype(), op_name(c.op).data(),
                               [&]<class T>() { reduce_tensor<R<T>, T>(c.inputs[0], c.outputs[0], c.attrs.axes); });
}

template <bool kMax> void arg_kernel(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  backend_common::dispatch_numeric(x.dtype(), op_name(c.op).data(), [&]<class T>() {
    using C = compute_t<T>;
    const LinePlan lp = make_line_plan(x, c.outputs[0], c.attrs.axis);
    parallel_lines(lp, [&](char* out, const char* in) {
      C best = static_cast<C>(*reinterpret_cast<const T*>(in));
      int64_t best_i = 0;
      for (int64_t i = 1; i < lp.length && !kmath::isnan(best); ++i) {
        const C v = static_cast<C>(*reinterpret_cast<const T*>(in + i * lp.in_step));
        if ((kMax ? v > best : v < best) || kmath::isnan(v)) {
          best = v;
          best_i = i;
        }
      }
      *reinterpret_cast<int64_t*>(out) = best_i;
    });
  });
}

void cumsum_kernel(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  backend_common::dispatch_numeric(x.dtype(), "cumsum", [&]<class T>() {
    const LinePlan lp = make_line_plan(x, c.outputs[0], c.attrs.axis);
    parallel_lines(lp, [&](char* out, const char* in) {
      auto acc = SumR<T>::init();
      for (int64_t i = 0; i < lp.length; ++i) {
        acc = SumR<T>::step(acc, *reinterpret_cast<const T*>(in + i * lp.in_step));
        *reinterpret_cast<T*>(out + i * lp.out_step) = SumR<T>::finish(acc);
      }
    });
  });
}
}  // namespace

void register_reductions(KernelTable& table) {
  table[OpId::Sum] = &reduce_kernel<SumR>;
  table[OpId::Prod] = &reduce_kernel<ProdR>;
  table[OpId::Max] = &extreme_kernel<MaxR>;
  table[OpId::Min] = &extreme_kernel<MinR>;
  table[OpId::Argmax] = &arg_kernel<true>;
  table[OpId::Argmin] = &arg_kernel<false>;
  table[OpId::Cumsum] = &cumsum_kernel;
}

TESSERA_CPU_KERNELS_END
