// Group and instance normalisation, as layer_norm over [N, groups, C / groups * spatial]: each
// group's channels and positions are one layer_norm row, so the statistics, the normalisation
// and their gradients are layer_norm's fused kernels on every backend; the per-channel affine
// follows as one broadcast multiply-add.
#include "dispatch.h"
#include "tessera/autocast.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/nn.h"

namespace tessera {
namespace {
Tensor per_channel(const Tensor& p, int64_t dims) {  // [C] -> [1, C, 1, ...] for x of `dims` axes
  Shape s(static_cast<size_t>(dims), 1);
  s[1] = p.size(0);
  return p.view(s);
}

Tensor normalize_groups(const Tensor& x_in, int64_t groups, const Tensor& weight, const Tensor& bias, double eps, const char* op) {
  detail::check_defined(x_in, op);
  const Tensor x = autocast(x_in, CastPolicy::f32);  // as layer_norm: statistics in f32 under autocast
  TESSERA_CHECK(x.dim() >= 2, op, "input must be [N, C, ...], got ", shape_str(x.shape()));
  TESSERA_CHECK(is_floating(x.dtype()), op, "expected a floating dtype, got ", x.dtype());
  const int64_t n = x.size(0), c = x.size(1);
  TESSERA_CHECK(groups >= 1 && c % groups == 0, op, groups, " groups do not divide the ", c, " channels of ", shape_str(x.shape()));
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    TESSERA_CHECK(p->dim() == 1 && p->size(0) == c, op, "weight and bias must be [", c, "] (one per channel), got ", shape_str(p->shape()));
    TESSERA_CHECK(is_floating(p->dtype()), op, "weight and bias must be floating, got ", p->dtype());
  }
  detail::common_device({&x, &weight, &bias}, op);
  const int64_t rest = n * groups > 0 ? x.numel() / (n * groups) : 0;
  Tensor y = layer_norm(x.reshape({n, groups, rest}), 1, Tensor(), Tensor(), eps).reshape(x.shape());
  if (weight.defined()) y = mul(y, per_channel(weight.to(y.dtype()), x.dim()));
  if (bias.defined()) y = add(y, per_channel(bias.to(y.dtype()), x.dim()));
  return y;
}
}  // namespace

Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  return normalize_groups(x, groups, weight, bias, eps, "group_norm");
}

Tensor instance_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  detail::check_defined(x, "instance_norm");
  TESSERA_CHECK(x.dim() >= 3, "instance_norm", "input must be [N, C, spatial...], got ", shape_str(x.shape()));
  return normalize_groups(x, x.size(1), weight, bias, eps, "instance_norm");
}

}  // namespace tessera
