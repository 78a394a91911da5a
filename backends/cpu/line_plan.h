#pragma once
// Iteration over the 1-D lines of a tensor along one axis (softmax, cumsum, argmax, ...).
// Lines are independent, so they run in parallel; each line is processed sequentially,
// which keeps results independent of the thread count.
#include <algorithm>

#include "../common/strided_loop.h"
#include "cpu_backend.h"

namespace tessera::cpu {

struct LinePlan {
  backend_common::StridedPlan<2> outer;  // operand 0 = out, 1 = in
  int64_t length = 0;                    // elements per line
  int64_t in_step = 0, out_step = 0;     // bytes between consecutive line elements
};

/** Lines of `in` along `axis`; `out` either has the same shape or lacks `axis`. */
inline LinePlan make_line_plan(const Tensor& in, const Tensor& out, int64_t axis) {
  const bool out_has_axis = out.dim() == in.dim();
  Shape outer = in.shape();
  Strides in_strides = in.strides();
  Strides out_strides = out.strides();
  outer.erase(outer.begin() + axis);
  in_strides.erase(in_strides.begin() + axis);
  if (out_has_axis) out_strides.erase(out_strides.begin() + axis);
  LinePlan lp;
  lp.outer = backend_common::make_plan<2>(
      outer, {&out_strides, &in_strides},
      {static_cast<char*>(out.data_ptr()), static_cast<char*>(in.data_ptr())},
      {static_cast<int64_t>(out.itemsize()), static_cast<int64_t>(in.itemsize())});
  lp.length = in.shape()[axis];
  lp.in_step = in.strides()[axis] * static_cast<int64_t>(in.itemsize());
  lp.out_step = out_has_axis ? out.strides()[axis] * static_cast<int64_t>(out.itemsize()) : 0;
  return lp;
}

/** Calls f(out_line, in_line) for every line, in parallel across lines. */
template <class F> void parallel_lines(const LinePlan& lp, F&& f) {
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(lp.length, 1));
  parallel_for(lp.outer.numel, grain, [&](int64_t b, int64_t e) {
    backend_common::for_range(lp.outer, b, e, [&](char* const* p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) f(p[0] + i * s[0], p[1] + i * s[1]);
    });
  });
}

}  // namespace tessera::cpu
