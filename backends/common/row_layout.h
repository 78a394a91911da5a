#pragma once
// Row layouts for the device backends' row kernels (reductions, softmax, cumsum): the reduced
// or scanned axes are moved last and made dense, so a kernel sees a [rows, len] matrix.
#include <algorithm>
#include <vector>

#include "tessera/backend/kernel.h"
#include "tessera/ops/creation.h"
#include "tessera/tensor.h"

namespace tessera::backend_common {

// [rows, len] contiguous view of x with `axes` last; `order` receives the permutation used.
inline Tensor as_rows(const Tensor& x, const std::vector<int64_t>& axes, std::vector<int64_t>& order) {
  order.clear();
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) order.push_back(d);
  }
  order.insert(order.end(), axes.begin(), axes.end());
  int64_t len = 1;
  for (int64_t a : axes) len *= x.size(a);
  return x.permute(order).contiguous().view({len == 0 ? 0 : x.numel() / std::max<int64_t>(len, 1), len});
}

// Runs a [rows, len] -> [rows, len] kernel along `axis` and writes the result back in place.
template <class Launch> void along_axis(const KernelCall& c, Launch&& launch_rows) {
  const Tensor& x = c.inputs[0];
  Tensor& out = c.outputs[0];
  std::vector<int64_t> order;
  const Tensor rows = as_rows(x, {c.attrs.axis}, order);
  // Along the last axis of a dense output (softmax over features, the common case) the kernel
  // writes the output itself: a temporary and a copy back doubled softmax's memory traffic.
  bool identity = true;
  for (size_t i = 0; i < order.size(); ++i) identity = identity && order[i] == static_cast<int64_t>(i);
  if (identity && out.is_contiguous()) {
    Tensor direct = out.view(rows.shape());
    launch_rows(rows, direct);
    return;
  }
  Tensor result = empty(rows.shape(), out.dtype(), out.device());
  launch_rows(rows, result);
  Shape permuted;
  for (int64_t d : order) permuted.push_back(x.size(d));
  out.permute(order).copy_(result.view(permuted));
}

}  // namespace tessera::backend_common
