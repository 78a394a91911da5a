// Pooling front-ends (max, average, adaptive average): checks, output shapes, and autograd
// records whose backward calls the pooling backward kernels.
#include "tessera/ops/nn.h"

#include <cmath>

#include "autograd/record.h"
#include "conv_internal.h"
#include "dispatch.h"
#include "tessera/autocast.h"
#include "tessera/graph.h"
#include "tessera/runtime.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/indexing.h"
#include "tessera/ops/reduction.h"
#include "tessera/ops/shape_ops.h"

namespace tessera {

using detail::check_size2;
using detail::out_size;
using detail::run_kernel;

namespace {
OpAttrs pool_attrs(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding, Size2 dilation, const char* op) {
  detail::check_defined(x, op);
  TESSERA_CHECK(x.dim() == 4, op, "input must be [N, C, H, W], got ", shape_str(x.shape()));
  TESSERA_CHECK(is_floating(x.dtype()), op, "expected a floating dtype, got ", x.dtype());
  OpAttrs a;
  a.kernel = kernel;
  a.stride = stride.value_or(kernel);
  a.padding = padding;
  a.dilation = dilation;
  check_size2(a.kernel, 1, op, "kernel");
  check_size2(a.stride, 1, op, "stride");
  check_size2(a.dilation, 1, op, "dilation");
  TESSERA_CHECK(padding[0] >= 0 && padding[1] >= 0 && padding[0] <= kernel[0] / 2 && padding[1] <= kernel[1] / 2, op,
                "padding must be between 0 and half the kernel, got [", padding[0], ", ", padding[1], "]");
  return a;
}
Shape pool_shape(const Tensor& x, const OpAttrs& a, const char* op) {
  const int64_t ho = out_size(x.size(2), a.kernel[0], a.stride[0], a.padding[0], a.dilation[0], op);
  const int64_t wo = out_size(x.size(3), a.kernel[1], a.stride[1], a.padding[1], a.dilation[1], op);
  TESSERA_CHECK(ho > 0 && wo > 0, op, "input ", shape_str(x.shape()), " is smaller than the pooling window");
  return {x.size(0), x.size(1), ho, wo};
}
}  // namespace

namespace {
// want_indices: the caller returns them; the backward needs them too. Without either the
// kernel skips them (8 bytes per output, more than the output itself for f32).
std::pair<Tensor, Tensor> max_pool2d_impl(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding, Size2 dilation,
                                          bool want_indices) {
  const OpAttrs a = pool_attrs(x, kernel, stride, padding, dilation, "max_pool2d");
  const Shape shape = pool_shape(x, a, "max_pool2d");
  const bool indices = want_indices || autograd::needs_grad({&x});
  Tensor outs[2] = {empty(shape, x.dtype(), x.device()), indices ? empty(shape, DType::i64, x.device()) : Tensor()};
  const Tensor in = x.detach().contiguous();
  if (outs[0].numel() > 0) run_kernel(OpId::MaxPool2d, x.device(), std::span<const Tensor>(&in, 1), outs, a);
  if (autograd::needs_grad({&x})) {
    autograd::record("max_pool2d", {x}, outs[0], [idx = outs[1], xshape = x.shape(), a](const Tensor& g) {
      Tensor gx = empty(xshape, g.dtype(), g.device());
      const Tensor in2[2] = {g.contiguous(), idx};
      detail::run_kernel(OpId::MaxPool2dBackward, g.device(), in2, std::span<Tensor>(&gx, 1), a);
      return std::vector<Tensor>{gx};
    });
  }
  return {outs[0], outs[1]};
}
}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding,
                                                  Size2 dilation) {
  return max_pool2d_impl(x, kernel, stride, padding, dilation, true);
}

Tensor max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding, Size2 dilation) {
  return max_pool2d_impl(x, kernel, stride, padding, dilation, false).first;
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding, bool count_include_pad) {
  OpAttrs a = pool_attrs(x, kernel, stride, padding, {1, 1}, "avg_pool2d");
  a.count_include_pad = count_include_pad;
  Tensor out = empty(pool_shape(x, a, "avg_pool2d"), x.dtype(), x.device());
  const Tensor in = x.detach().contiguous();
  if (out.numel() > 0) run_kernel(OpId::AvgPool2d, x.device(), std::span<const Tensor>(&in, 1), std::span<Tensor>(&out, 1), a);
  if (autograd::needs_grad({&x})) {
    autograd::record("avg_pool2d", {x}, out, [xshape = x.shape(), a](const Tensor& g) {
      Tensor gx = empty(xshape, g.dtype(), g.device());
      const Tensor gc = g.contiguous();
      detail::run_kernel(OpId::AvgPool2dBackward, g.device(), std::span<const Tensor>(&gc, 1), std::span<Tensor>(&gx, 1), a);
      return std::vector<Tensor>{gx};
    });
  }
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size) {
  detail::check_defined(x, "adaptive_avg_pool2d");
  TESSERA_CHECK(x.dim() == 4, "adaptive_avg_pool2d", "input must be [N, C, H, W], got ", shape_str(x.shape()));
  check_size2(output_size, 1, "adaptive_avg_pool2d", "output size");
  const int64_t h = x.size(2), w = x.size(3), oh = output_size[0], ow = output_size[1];
  if (oh == 1 && ow == 1) return mean(x, {2, 3}, true);
  if (h % oh == 0 && w % ow == 0) return avg_pool2d(x, {h / oh, w / ow});
  // Uneven windows: window i covers [floor(i * H / oh), ceil((i + 1) * H / oh)), one op per
  // window -- bounded, so a huge output size is an error rather than a loop that never ends.
  checked_numel({x.size(0), x.size(1), oh, ow}, "adaptive_avg_pool2d");
  TESSERA_CHECK(oh <= (int64_t{1} << 12) && ow <= (int64_t{1} << 12), "adaptive_avg_pool2d", "output size [", oh, ", ", ow,
                "] with uneven windows over ", shape_str(x.shape()), ": at most 4096 per axis");
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < oh; ++i) {
    const int64_t h0 = i * h / oh, h1 = ((i + 1) * h + oh - 1) / oh;  // h is a real size (< 2^40): no overflow
    std::vector<Tensor> cols;
    for (int64_t j = 0; j < ow; ++j) {
      const int64_t w0 = j * w / ow, w1 = ((j + 1) * w + ow - 1) / ow;
      cols.push_back(mean(x.narrow(2, h0, h1 - h0).narrow(3, w0, w1 - w0), {2, 3}));
    }
    rows.push_back(stack(cols, -1));
  }
  return stack(rows, -2);
}

}  // namespace tessera
