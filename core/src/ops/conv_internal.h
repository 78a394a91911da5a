#pragma once
// Window geometry shared by convolution and pooling, and the conv2d backward kernels'
// front-ends, shared by conv2d (conv.cpp) and conv_transpose2d (conv_variants.cpp), whose forward
// is conv2d's input gradient.
#include "dispatch.h"
#include "tessera/ops/nn.h"

namespace tessera::detail {

// (in + 2p - d(k - 1) - 1) / s + 1 in 128-bit arithmetic: with sizes from the user the int64
// expression can overflow (UB, and a wrapped size). A window that does not fit gives 0 (C++
// division truncates toward zero, which would turn -1 / 2 into a size of 1).
inline int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, const char* op = "conv2d") {
  const __int128 span = static_cast<__int128>(in) + 2 * static_cast<__int128>(p) - static_cast<__int128>(d) * (k - 1) - 1;
  if (span < 0) return 0;
  const __int128 n = span / s + 1;
  TESSERA_CHECK(n <= INT64_MAX, op, "output size overflows int64 (input ", in, ", kernel ", k, ", padding ", p, ")");
  return static_cast<int64_t>(n);
}

// Strides, paddings, dilations and kernel sizes are bounded (2^20) so the kernels' index
// arithmetic (in + 2p, d * (k - 1), ...) cannot overflow int64 for any tensor that fits in memory.
inline constexpr int64_t kMaxWindowParam = int64_t{1} << 20;
inline void check_size2(Size2 v, int64_t min, const char* op, const char* what) {
  TESSERA_CHECK(v[0] >= min && v[1] >= min && v[0] <= kMaxWindowParam && v[1] <= kMaxWindowParam, op, what, " must be in [", min,
                ", 2^20], got [", v[0], ", ", v[1], "]");
}

/** The kernel attributes of a conv2d with `weight` [O, C/g, kh, kw]. */
OpAttrs conv_attrs(const Tensor& weight, Size2 stride, Size2 padding, Size2 dilation, int64_t groups);
/** conv2d's gradient with respect to its input of shape `x_shape`. */
Tensor conv_input_grad(const Tensor& g, const Tensor& w, const Shape& x_shape, const OpAttrs& a);
/** conv2d's gradient with respect to its weight of shape `w_shape`. */
Tensor conv_weight_grad(const Tensor& g, const Tensor& x, const Shape& w_shape, const OpAttrs& a);

}  // namespace tessera::detail
