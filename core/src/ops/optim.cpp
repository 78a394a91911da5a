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

void adam_update_multi_(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& exp_avg,
                        std::vector<Tensor>& exp_avg_sq, const OptimizerAttrs& attrs) {
  const size_t k = params.size();
  TESSERA_CHECK(grads.size() == k && exp_avg.size() == k && exp_avg_sq.size() == k, "adam_multi_update", "list lengths differ: ", k,
                " parameters, ", grads.size(), " gradients, ", exp_avg.size(), " exp_avg, ", exp_avg_sq.size(), " exp_avg_sq");
  if (k == 0) return;
  for (size_t i = 0; i < k; ++i) {
    detail::check_defined(params[i], "adam_multi_update", "parameter");
    TESSERA_CHECK(is_floating(params[i].dtype()) && params[i].is_contiguous(), "adam_multi_update",
                  "parameters must be contiguous floating tensors");
    TESSERA_CHECK(params[i].dtype() == params[0].dtype() && params[i].device() == params[0].device(), "adam_multi_update",
                  "parameter ", i, " is ", params[i].dtype(), " on ", params[i].device().str(), ", parameter 0 ", params[0].dtype(), " on ",
                  params[0].device().str());
    for (auto [t, what] : {std::pair{&grads[i], "gradient"}, {&exp_avg[i], "exp_avg"}, {&exp_avg_sq[i], "exp_avg_sq"}}) {
      check_same(params[i], *t, "adam_multi_update", what);
    }
  }
  OpAttrs a;
  a.optim = attrs;
  std::vector<Tensor> ins, outs;
  for (size_t i = 0; i < k; ++i) {
    if (params[i].numel() == 0) continue;
    ins.push_back(grads[i].detach());
  }
  for (auto* list : {&params, &exp_avg, &exp_avg_sq}) {
    for (size_t i = 0; i < k; ++i) {
      if (params[i].numel() > 0) outs.push_back((*list)[i].detach());
    }
  }
  if (!ins.empty()) detail::run_kernel(OpId::AdamMultiUpdate, params[0].device(), ins, outs, a);
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
