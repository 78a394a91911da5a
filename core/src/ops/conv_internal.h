#pragma once
// The conv2d backward kernels' front-ends, shared by conv2d (nn.cpp) and conv_transpose2d
// (conv_variants.cpp), whose forward is conv2d's input gradient.
#include "dispatch.h"
#include "tessera/ops/nn.h"

namespace tessera::detail {

/** The kernel attributes of a conv2d with `weight` [O, C/g, kh, kw]. */
OpAttrs conv_attrs(const Tensor& weight, Size2 stride, Size2 padding, Size2 dilation, int64_t groups);
/** conv2d's gradient with respect to its input of shape `x_shape`. */
Tensor conv_input_grad(const Tensor& g, const Tensor& w, const Shape& x_shape, const OpAttrs& a);
/** conv2d's gradient with respect to its weight of shape `w_shape`. */
Tensor conv_weight_grad(const Tensor& g, const Tensor& x, const Shape& w_shape, const OpAttrs& a);

}  // namespace tessera::detail
