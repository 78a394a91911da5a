// batch_norm and layer_norm: checks, statistics outputs, and autograd records whose backward
// calls the normalisation backward kernels.
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

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight_in, const Tensor& bias_in,
                  bool training, double momentum, double eps) {
  const Tensor x = autocast(x_in, CastPolicy::f32), weight = autocast(weight_in, CastPolicy::f32),
               bias = autocast(bias_in, CastPolicy::f32);
  detail::check_defined(x, "batch_norm");
  TESSERA_CHECK(x.dim() >= 2, "batch_norm", "input must be [N, C, ...], got ", shape_str(x.shape()));
  TESSERA_CHECK(is_floating(x.dtype()), "batch_norm", "expected a floating dtype, got ", x.dtype());
  const int64_t c = x.size(1);
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias}) {
    TESSERA_CHECK(!t->defined() || (t->dim() == 1 && t->size(0) == c), "batch_norm", "parameter ", shape_str(t->shape()),
                  " does not match ", c, " channels of ", shape_str(x.shape()));
  }
  Shape bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = c;
  if (!training) {
    TESSERA_CHECK(running_mean.defined() && running_var.defined(), "batch_norm", "eval mode needs running statistics");
    Tensor y = mul(sub(x, running_mean.reshape(bshape)), rsqrt(add(running_var.reshape(bshape), eps)));
    if (weight.defined()) y = mul(y, weight.reshape(bshape));
    if (bias.defined()) y = add(y, bias.reshape(bshape));
    return y;
  }
  const int64_t n = x.size(0), spatial = x.numel() / std::max<int64_t>(n * c, 1);
  TESSERA_CHECK(n * spatial > 1, "batch_norm", "expected more than one value per channel in training, got input ", shape_str(x.shape()));
  const Tensor x3 = x.detach().contiguous().view({n, c, spatial});
  OpAttrs attrs;
  attrs.eps = eps;
  const DType stat_dt = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor outs[3] = {empty(x3.shape(), x.dtype(), x.device()), empty({c}, stat_dt, x.device()), empty({c}, stat_dt, x.device())};
  const Tensor in[3] = {x3, weight.defined() ? weight.detach() : Tensor(), bias.defined() ? bias.detach() : Tensor()};
  run_kernel(OpId::BatchNorm, x.device(), in, outs, attrs);
  if (running_mean.defined() && running_var.defined()) {
    NoGradGuard no_grad;
    const double m = static_cast<double>(n * spatial);
    const Tensor batch_var = sub(reciprocal(square(outs[2])), eps);
    Tensor rm = running_mean, rv = running_var;
    rm.copy_(add(mul(rm, 1 - momentum), mul(outs[1], momentum)));
    rv.copy_(add(mul(rv, 1 - momentum), mul(batch_var, momentum * m / (m - 1))));
  }
  Tensor y = outs[0].view(x.shape());
  if (autograd::needs_grad({&x, &weight, &bias})) {
    autograd::record("batch_norm", {x, weight, bias}, y,
                     [x3, w = weight.defined() ? weight.detach() : Tensor(), mean = outs[1], invstd = outs[2], has_w = weight.defined(),
                      has_b = bias.defined(), xshape = x.shape()](const Tensor& g) {
                       Tensor grads[3] = {empty(x3.shape(), g.dtype(), g.device()), empty({x3.size(1)}, g.dtype(), g.device()),
                                          empty({x3.size(1)}, g.dtype(), g.device())};
                       const Tensor in2[5] = {g.contiguous().view(x3.shape()), x3, w, mean, invstd};
                       detail::run_kernel(OpId::BatchNormBackward, g.device(), in2, grads, OpAttrs{});
                       return std::vector<Tensor>{grads[0].view(xshape), has_w ? grads[1] : Tensor(), has_b ? grads[2] : Tensor()};
                     });
  }
  return y;
}

Tensor layer_norm(const Tensor& x_in, int64_t normalized_dims, const Tensor& weight_in, const Tensor& bias_in, double eps) {
  const Tensor x = autocast(x_in, CastPolicy::f32), weight = autocast(weight_in, CastPolicy::f32),
               bias = autocast(bias_in, CastPolicy::f32);
  detail::check_defined(x, "layer_norm");
  TESSERA_CHECK(normalized_dims >= 1 && normalized_dims <= x.dim(), "layer_norm", "cannot normalise the last ", normalized_dims,
                " axes of ", shape_str(x.shape()));
  TESSERA_CHECK(is_floating(x.dtype()), "layer_norm", "expected a floating dtype, got ", x.dtype());
  const Shape norm_shape(x.shape().end() - normalized_dims, x.shape().end());
  for (const Tensor* t : {&weight, &bias}) {
    TESSERA_CHECK(!t->defined() || t->shape() == norm_shape, "layer_norm", "parameter ", shape_str(t->shape()),
                  " does not match normalized shape ", shape_str(norm_shape));
  }
  const int64_t d = numel(norm_shape), m = d ? x.numel() / d : 0;
  const Tensor x2 = x.detach().contiguous().view({m, d});
  OpAttrs attrs;
  attrs.eps = eps;
  const DType stat_dt = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor outs[3] = {empty({m, d}, x.dtype(), x.device()), empty({m}, stat_dt, x.device()), empty({m}, stat_dt, x.device())};
  const Tensor in[3] = {x2, weight.defined() ? weight.detach().reshape({d}) : Tensor(),
                        bias.defined() ? bias.detach().reshape({d}) : Tensor()};
  if (x.numel() > 0) run_kernel(OpId::LayerNorm, x.device(), in, outs, attrs);
  Tensor y = outs[0].view(x.shape());
  if (autograd::needs_grad({&x, &weight, &bias})) {
    autograd::record("layer_norm", {x, weight, bias}, y,
                     [x2, w = in[1], mean = outs[1], rstd = outs[2], has_w = weight.defined(), has_b = bias.defined(), xshape = x.shape(),
                      norm_shape](const Tensor& g) {
                       const int64_t dd = x2.size(1);
                       Tensor grads[3] = {empty(x2.shape(), g.dtype(), g.device()), empty({dd}, g.dtype(), g.device()),
                                          empty({dd}, g.dtype(), g.device())};
                       const Tensor in2[5] = {g.contiguous().view(x2.shape()), x2, w, mean, rstd};
                       detail::run_kernel(OpId::LayerNormBackward, g.device(), in2, grads, OpAttrs{});
                       return std::vector<Tensor>{grads[0].view(xshape), has_w ? grads[1].view(norm_shape) : Tensor(),
                                                  has_b ? grads[2].view(norm_shape) : Tensor()};
                     });
  }
  return y;
}

}  // namespace tessera
