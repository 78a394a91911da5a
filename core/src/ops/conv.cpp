// conv2d's front-end: checks, the output shape, and the autograd record whose backward calls the
// dedicated input- and weight-gradient kernels.
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

namespace detail {
OpAttrs conv_attrs(const Tensor& weight, Size2 stride, Size2 padding, Size2 dilation, int64_t groups) {
  OpAttrs attrs;
  attrs.kernel = {weight.size(2), weight.size(3)};
  attrs.stride = stride;
  attrs.padding = padding;
  attrs.dilation = dilation;
  attrs.groups = groups;
  return attrs;
}
Tensor conv_input_grad(const Tensor& g, const Tensor& w, const Shape& x_shape, const OpAttrs& a) {
  Tensor gx = empty(x_shape, g.dtype(), g.device());
  const Tensor in[2] = {g.contiguous(), w.contiguous()};
  run_kernel(OpId::Conv2dInputGrad, g.device(), in, std::span<Tensor>(&gx, 1), a);
  return gx;
}
Tensor conv_weight_grad(const Tensor& g, const Tensor& x, const Shape& w_shape, const OpAttrs& a) {
  Tensor gw = empty(w_shape, g.dtype(), g.device());
  const Tensor in[2] = {g.contiguous(), x.contiguous()};
  run_kernel(OpId::Conv2dWeightGrad, g.device(), in, std::span<Tensor>(&gw, 1), a);
  return gw;
}
}  // namespace detail
using detail::conv_input_grad;
using detail::conv_weight_grad;

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, Size2 stride, Size2 padding, Size2 dilation,
              int64_t groups) {
  const Tensor x = autocast(x_in, CastPolicy::lower), weight = autocast(weight_in, CastPolicy::lower),
               bias = autocast(bias_in, CastPolicy::lower);
  detail::check_defined(x, "conv2d", "input");
  detail::check_defined(weight, "conv2d", "weight");
  const Device device = detail::common_device({&x, &weight, &bias}, "conv2d");
  TESSERA_CHECK(x.dim() == 4, "conv2d", "input must be [N, C, H, W], got ", shape_str(x.shape()));
  TESSERA_CHECK(weight.dim() == 4, "conv2d", "weight must be [O, C/groups, kh, kw], got ", shape_str(weight.shape()));
  TESSERA_CHECK(groups >= 1 && x.size(1) % groups == 0 && weight.size(0) % groups == 0, "conv2d", "groups ", groups,
                " must divide input channels ", x.size(1), " and output channels ", weight.size(0));
  TESSERA_CHECK(weight.size(1) * groups == x.size(1), "conv2d", "weight ", shape_str(weight.shape()), " expects ", weight.size(1) * groups,
                " input channels, input ", shape_str(x.shape()), " has ", x.size(1));
  TESSERA_CHECK(x.dtype() == weight.dtype() && is_floating(x.dtype()), "conv2d", "input and weight must share a floating dtype, got ",
                x.dtype(), " and ", weight.dtype());
  check_size2(stride, 1, "conv2d", "stride");
  check_size2(padding, 0, "conv2d", "padding");
  check_size2(dilation, 1, "conv2d", "dilation");
  if (bias.defined()) {
    TESSERA_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0) && bias.dtype() == x.dtype(), "conv2d", "bias ",
                  shape_str(bias.shape()), " does not match ", weight.size(0), " output channels");
  }
  const int64_t ho = out_size(x.size(2), weight.size(2), stride[0], padding[0], dilation[0]);
  const int64_t wo = out_size(x.size(3), weight.size(3), stride[1], padding[1], dilation[1]);
  TESSERA_CHECK(ho > 0 && wo > 0, "conv2d", "input ", shape_str(x.shape()), " is smaller than the kernel ", shape_str(weight.shape()),
                " with this padding/dilation");
  const OpAttrs attrs = detail::conv_attrs(weight, stride, padding, dilation, groups);
  Tensor out = empty({x.size(0), weight.size(0), ho, wo}, x.dtype(), device);
  const Tensor in[3] = {x.detach().contiguous(), weight.detach().contiguous(), bias.defined() ? bias.detach().contiguous() : Tensor()};
  if (out.numel() > 0) run_kernel(OpId::Conv2d, device, in, std::span<Tensor>(&out, 1), attrs);
  if (autograd::needs_grad({&x, &weight, &bias})) {
    autograd::record("conv2d", {x, weight, bias}, out,
                     [xs = in[0], ws = in[1], attrs, want_x = autograd::wants_grad(x), want_w = autograd::wants_grad(weight),
                      want_b = autograd::wants_grad(bias)](const Tensor& g_in) {
                       const Tensor g = want_x && want_w ? g_in.contiguous() : g_in;  // once for both kernels
                       return std::vector<Tensor>{want_x ? conv_input_grad(g, ws, xs.shape(), attrs) : Tensor(),
                                                  want_w ? conv_weight_grad(g, xs, ws.shape(), attrs) : Tensor(),
                                                  want_b ? sum(g, {0, 2, 3}) : Tensor()};
                     });
  }
  return out;
}

}  // namespace tessera
