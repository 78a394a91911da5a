// Convolution forms built on conv2d: string padding ("same" / "valid") and conv1d (a conv2d
// over a height of 1), so they share its kernels and gradients on every backend.
#include "dispatch.h"
#include "tessera/ops/nn.h"

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

}  // namespace tessera
