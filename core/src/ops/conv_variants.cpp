// Convolution forms built on conv2d: string padding ("same" / "valid"), conv1d (a conv2d over
// a height of 1), conv3d (conv2d on depth slices, summed over the kernel's depth) and
// conv_transpose2d (conv2d's input-gradient kernel run forwards), so they share its kernels
// and gradients on every backend.
#include "autograd/record.h"
#include "conv_internal.h"
#include "tessera/autocast.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/reduction.h"
#include "tessera/ops/shape_ops.h"

namespace tessera {

namespace {
// "same" on one axis: the symmetric padding that covers the larger side, and where the
// output starts (1 when the total is odd: PyTorch pads the extra element at the end).
struct SamePad {
  int64_t pad, skip;
};
SamePad same_pad(int64_t kernel, int64_t dilation) {
  const int64_t total = dilation * (kernel - 1);
  return {total - total / 2, (total - total / 2) - total / 2};
}
}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2 stride, PaddingMode padding, Size2 dilation,
              int64_t groups) {
  if (padding == PaddingMode::valid) return conv2d(x, weight, bias, stride, Size2{0, 0}, dilation, groups);
  TESSERA_CHECK(stride[0] == 1 && stride[1] == 1, "conv2d", "padding \"same\" needs stride 1, got [", stride[0], ", ", stride[1], "]");
  detail::check_defined(x, "conv2d", "input");
  detail::check_defined(weight, "conv2d", "weight");
  TESSERA_CHECK(x.dim() == 4 && weight.dim() == 4, "conv2d", "expected input [N, C, H, W] and weight [O, C/g, kh, kw], got ",
                shape_str(x.shape()), " and ", shape_str(weight.shape()));
  const SamePad h = same_pad(weight.size(2), dilation[0]), w = same_pad(weight.size(3), dilation[1]);
  Tensor y = conv2d(x, weight, bias, stride, Size2{h.pad, w.pad}, dilation, groups);
  if (h.skip || w.skip) y = y.narrow(2, h.skip, x.size(2)).narrow(3, w.skip, x.size(3));
  return y;
}

namespace {
void check_1d(const Tensor& x, const Tensor& weight) {
  detail::check_defined(x, "conv1d", "input");
  detail::check_defined(weight, "conv1d", "weight");
  TESSERA_CHECK(x.dim() == 3 && weight.dim() == 3, "conv1d", "expected input [N, C, L] and weight [O, C/g, k], got ",
                shape_str(x.shape()), " and ", shape_str(weight.shape()));
}
}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding, int64_t dilation,
              int64_t groups) {
  check_1d(x, weight);
  return conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, Size2{1, stride}, Size2{0, padding}, Size2{1, dilation}, groups).squeeze(2);
}

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, PaddingMode padding, int64_t dilation,
              int64_t groups) {
  check_1d(x, weight);
  return conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, Size2{1, stride}, padding, Size2{1, dilation}, groups).squeeze(2);
}

Tensor conv_transpose2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, Size2 stride, Size2 padding,
                        Size2 output_padding, int64_t groups, Size2 dilation) {
  const char* op = "conv_transpose2d";
  const Tensor x = autocast(x_in, CastPolicy::lower), weight = autocast(weight_in, CastPolicy::lower),
               bias = autocast(bias_in, CastPolicy::lower);
  detail::check_defined(x, op, "input");
  detail::check_defined(weight, op, "weight");
  const Device device = detail::common_device({&x, &weight, &bias}, op);
  TESSERA_CHECK(x.dim() == 4 && weight.dim() == 4, op, "expected input [N, C, H, W] and weight [C, O/groups, kh, kw], got ",
                shape_str(x.shape()), " and ", shape_str(weight.shape()));
  TESSERA_CHECK(groups >= 1 && weight.size(0) == x.size(1) && x.size(1) % groups == 0, op, "weight ", shape_str(weight.shape()),
                " needs ", x.size(1), " input channels divisible by groups ", groups, ", input ", shape_str(x.shape()));
  TESSERA_CHECK(x.dtype() == weight.dtype() && is_floating(x.dtype()), op, "input and weight must share a floating dtype, got ",
                x.dtype(), " and ", weight.dtype());
  Shape out_shape = {x.size(0), weight.size(1) * groups, 0, 0};
  for (int i = 0; i < 2; ++i) {
    TESSERA_CHECK(stride[i] >= 1 && dilation[i] >= 1 && padding[i] >= 0 && output_padding[i] >= 0, op,
                  "stride and dilation must be positive and paddings non-negative, got stride [", stride[0], ", ", stride[1],
                  "], padding [", padding[0], ", ", padding[1], "], output_padding [", output_padding[0], ", ", output_padding[1], "]");
    TESSERA_CHECK(output_padding[i] < stride[i] || output_padding[i] < dilation[i], op, "output_padding ", output_padding[i],
                  " must be smaller than the stride ", stride[i], " or the dilation ", dilation[i]);
    const __int128 size = static_cast<__int128>(x.size(2 + i) - 1) * stride[i] - 2 * padding[i] +
                          static_cast<__int128>(dilation[i]) * (weight.size(2 + i) - 1) + output_padding[i] + 1;
    TESSERA_CHECK(size > 0 && size <= (int64_t{1} << 40), op, "input ", shape_str(x.shape()), " with this stride, padding and kernel ",
                  shape_str(weight.shape()), " gives an output size of ", static_cast<int64_t>(size));
    out_shape[2 + i] = static_cast<int64_t>(size);
  }
  if (bias.defined()) {
    TESSERA_CHECK(bias.dim() == 1 && bias.size(0) == out_shape[1] && bias.dtype() == x.dtype(), op, "bias ", shape_str(bias.shape()),
                  " does not match ", out_shape[1], " output channels");
  }
  const OpAttrs attrs = detail::conv_attrs(weight, stride, padding, dilation, groups);
  const Tensor xs = x.detach().contiguous(), ws = weight.detach().contiguous();
  Tensor out = x.numel() > 0 ? detail::conv_input_grad(xs, ws, out_shape, attrs) : zeros(out_shape, x.dtype(), device);
  if (bias.defined()) out = add(out, bias.detach().reshape({1, -1, 1, 1}));
  if (autograd::needs_grad({&x, &weight, &bias})) {
    autograd::record(op, {x, weight, bias}, out,
                     [xs, ws, attrs, want_x = autograd::wants_grad(x), want_w = autograd::wants_grad(weight),
                      want_b = autograd::wants_grad(bias)](const Tensor& g) {
      // conv2d of the output gradient is the input gradient; with an output_padding at least
      // the dilation it covers a row or column more than the input, which is cut off.
      Tensor gx;
      if (want_x) {
        gx = conv2d(g, ws, Tensor(), attrs.stride, attrs.padding, attrs.dilation, attrs.groups);
        if (gx.size(2) != xs.size(2) || gx.size(3) != xs.size(3)) gx = gx.narrow(2, 0, xs.size(2)).narrow(3, 0, xs.size(3));
      }
      return std::vector<Tensor>{gx, want_w ? detail::conv_weight_grad(xs, g, ws.shape(), attrs) : Tensor(),
                                 want_b ? sum(g, {0, 2, 3}) : Tensor()};
    });
  }
  return out;
}

Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size3 stride, Size3 padding, Size3 dilation, int64_t groups) {
  const char* op = "conv3d";
  detail::check_defined(x, op, "input");
  detail::check_defined(weight, op, "weight");
  TESSERA_CHECK(x.dim() == 5 && weight.dim() == 5, op, "expected input [N, C, D, H, W] and weight [O, C/g, kd, kh, kw], got ",
                shape_str(x.shape()), " and ", shape_str(weight.shape()));
  constexpr int64_t kMax = int64_t{1} << 20;  // as conv2d: index arithmetic cannot overflow
  TESSERA_CHECK(stride[0] >= 1 && dilation[0] >= 1 && padding[0] >= 0 && stride[0] <= kMax && dilation[0] <= kMax && padding[0] <= kMax, op,
                "depth stride and dilation must be in [1, 2^20] and the padding in [0, 2^20], got ", stride[0], ", ", dilation[0], ", ",
                padding[0]);
  const int64_t n = x.size(0), kd = weight.size(2);
  // Zeros around the depth axis, then one conv2d per kernel depth over all output depths at once
  // (the depth folded into the batch).
  const Tensor xp = padding[0] > 0 ? pad(x, {0, 0, 0, 0, padding[0], padding[0]}) : x;
  const int64_t span = xp.size(2) - dilation[0] * (kd - 1) - 1;
  TESSERA_CHECK(span >= 0, op, "input ", shape_str(x.shape()), " is shallower than the kernel ", shape_str(weight.shape()),
                " with this padding/dilation");
  const int64_t depth = span / stride[0] + 1;
  Tensor acc;
  for (int64_t k = 0; k < kd; ++k) {
    const int64_t start = k * dilation[0];
    const Tensor slices = xp.slice(2, start, start + (depth - 1) * stride[0] + 1, stride[0]);  // [N, C, Do, H, W]
    const Tensor planes = slices.permute({0, 2, 1, 3, 4}).reshape({n * depth, x.size(1), x.size(3), x.size(4)});
    const Tensor y = conv2d(planes, weight.select(2, k), Tensor(), Size2{stride[1], stride[2]}, Size2{padding[1], padding[2]},
                            Size2{dilation[1], dilation[2]}, groups);
    acc = acc.defined() ? add(acc, y) : y;
  }
  Tensor out = acc.reshape({n, depth, acc.size(1), acc.size(2), acc.size(3)}).permute({0, 2, 1, 3, 4});
  if (bias.defined()) {
    TESSERA_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), op, "bias ", shape_str(bias.shape()), " does not match ",
                  weight.size(0), " output channels");
    out = add(out, bias.reshape({1, -1, 1, 1, 1}));
  }
  return out.contiguous();
}

}  // namespace tessera
