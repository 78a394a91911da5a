#include "tessera/ops/optim.h"

#include "dispatch.h"

namespace tessera {

namespace {
void check_same(const Tensor& param, const Tensor& t, const char* op, const char* what) {
  detail::check_defined(t, op, what);
  TESSERA_CHECK(t.shape() == param.shape() && t.dtype() == param.dtype() && t.device() == param.device(), op, what, " ",
                shape_str(t.shape()), " ", t.dtype(), " on ", t.device().str(), " does not match the parameter ",
                shape_str(param.shape()), " ", param.dtype(), " on ", param.device().str());
  TESSERA_CHECK(t.is_contiguous(), op, what, " must be contiguous");
}
}  // namespace

void adam_update_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const OptimizerAttrs& attrs) {
  detail::check_defined(param, "adam_update", "parameter");
  TESSERA_CHECK(is_floating(param.dtype()) && param.is_contiguous(), "adam_update", "parameter must be a contiguous floating tensor");
  for (auto [t, what] : {std::pair{&grad, "gradient"}, {&exp_avg, "exp_avg"}, {&exp_avg_sq, "exp_avg_sq"}}) check_same(param, *t, "adam_update", what);
  OpAttrs a;
  a.optim = attrs;
  Tensor outs[3] = {param.detach(), exp_avg.detach(), exp_avg_sq.detach()};
  const Tensor g = grad.detach();
  if (param.numel() > 0) detail::run_kernel(OpId::AdamUpdate, param.device(), std::span<const Tensor>(&g, 1), outs, a);
}

void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const OptimizerAttrs& attrs) {
  detail::check_defined(param, "sgd_update", "parameter");
  TESSERA_CHECK(is_floating(param.dtype()) && param.is_contiguous(), "sgd_update", "parameter must be a contiguous floating tensor");
  check_same(param, grad, "sgd_update", "gradient");
  if (attrs.momentum != 0) check_same(param, momentum_buffer, "sgd_update", "momentum buffer");
  OpAttrs a;
  a.optim = attrs;
  Tensor outs[2] = {param.detach(), attrs.momentum != 0 ? momentum_buffer.detach() : param.detach()};
  const Tensor g = grad.detach();
  if (param.numel() > 0) detail::run_kernel(OpId::SgdUpdate, param.device(), std::span<const Tensor>(&g, 1), outs, a);
}

}  // namespace tessera
