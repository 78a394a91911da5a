#include "tessera/nn/optim.h"

#include "sharding.h"

#include <algorithm>
#include <cmath>

namespace tessera::nn {

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  size_t count = 0;
  for (const ParamGroup& g : groups_) count += g.params.size();
  // As PyTorch: an optimizer over nothing would step silently forever.
  TESSERA_CHECK(count > 0, "optimizer", "got an empty parameter list (a layer held as a member but never passed to register_module, "
                "or a model with no parameters?)");
  for (const ParamGroup& g : groups_) {
    TESSERA_CHECK(g.options.lr >= 0, "optimizer", "learning rate must be >= 0, got ", g.options.lr);
    for (const Tensor& p : g.params) {
      TESSERA_CHECK(p.defined() && p.requires_grad(), "optimizer", "parameters must be defined tensors that require grad");
    }
  }
}

void Optimizer::zero_grad() {
  for (ParamGroup& g : groups_) {
    for (Tensor& p : g.params) p.set_grad(Tensor());
  }
}

Tensor& Optimizer::state(size_t g, size_t p, const std::string& key) {
  const std::string k = detail::optimizer_state_key(g, p, key);
  auto it = state_.find(k);
  if (it == state_.end()) {
    const Tensor& param = groups_[g].params[p];
    it = state_.emplace(k, zeros(param.shape(), state_dtype(param), param.device())).first;
  }
  return it->second;
}

DType Optimizer::state_dtype(const Tensor& param) {
  return param.dtype() == DType::f16 || param.dtype() == DType::bf16 ? DType::f32 : param.dtype();
}

Tensor& Optimizer::master_weights(size_t g, size_t p) {
  const bool fresh = !has_state(g, p, "master");
  Tensor& m = state(g, p, "master");
  if (fresh) m.copy_(groups_[g].params[p].detach());
  return m;
}

bool Optimizer::has_state(size_t g, size_t p, const std::string& key) const {
  return state_.count(detail::optimizer_state_key(g, p, key)) > 0;
}

StateDict Optimizer::state_dict() const {
  StateDict out = state_;
  out["steps"] = scalar_tensor(steps_, DType::i64);
  for (size_t g = 0; g < groups_.size(); ++g) {
    out["group." + std::to_string(g) + ".lr"] = scalar_tensor(groups_[g].options.lr, DType::f64);
  }
  return out;
}

void Optimizer::load_state_dict(const StateDict& state) {
  StateDict restored;
  for (const auto& [k, t] : state) {
    if (k.rfind("state.", 0) != 0) continue;
    // state.<g>.<p>.<key>: the slot must exist and have the parameter's shape.
    const auto parsed = detail::parse_optimizer_state_key(k);
    TESSERA_CHECK(parsed.has_value(), "optimizer load_state_dict", "malformed key '", k, "'");
    const size_t g = parsed->group, p = parsed->param;
    TESSERA_CHECK(g < groups_.size() && p < groups_[g].params.size(), "optimizer load_state_dict", "key '", k,
                  "' refers to a parameter this optimizer does not have");
    const Tensor& param = groups_[g].params[p];
    TESSERA_CHECK(t.shape() == param.shape(), "optimizer load_state_dict", "shape mismatch for '", k, "': ",
                  shape_str(t.shape()), " vs parameter ", shape_str(param.shape()));
    restored[k] = t.to(param.device()).to(state_dtype(param)).clone();
  }
  state_ = std::move(restored);
  if (auto it = state.find("steps"); it != state.end()) steps_ = it->second.item<int64_t>();
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (auto it = state.find("group." + std::to_string(g) + ".lr"); it != state.end()) groups_[g].options.lr = it->second.item<double>();
  }
}

void SGD::step() {
  for_each_update([this](size_t gi, size_t pi, Tensor& p, Tensor g, const OptimOptions& o) {
    OptimizerAttrs a;
    a.lr = o.lr, a.weight_decay = o.weight_decay, a.momentum = o.momentum, a.dampening = o.dampening, a.nesterov = o.nesterov;
    // The first step initialises the buffer with the gradient itself (PyTorch).
    a.first_step = !has_state(gi, pi, "momentum_buffer");
    Tensor none;
    sgd_update_(p, g.contiguous(), o.momentum != 0 ? state(gi, pi, "momentum_buffer") : none, a);
  });
}

namespace {
// The tensors of one multi-tensor launch: same dtype and device.
struct AdamBatch {
  DType dtype;
  Device device;
  std::vector<Tensor> params, grads, exp_avg, exp_avg_sq;
};
}  // namespace

void Adam::step() {
  if (fused_kernels()) {
    // Multi-tensor apply: per parameter group, one adam_update_multi_ per (dtype, device) instead
    // of a launch per parameter; the same per-element update, so the same bits.
    NoGradGuard no_grad;
    ++steps_;
    for (size_t gi = 0; gi < param_groups().size(); ++gi) {
      const OptimOptions& o = param_groups()[gi].options;
      OptimizerAttrs a;
      a.lr = o.lr, a.weight_decay = o.weight_decay, a.beta1 = o.beta1, a.beta2 = o.beta2, a.eps = o.eps;
      a.bias_correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(steps_));
      a.bias_correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(steps_));
      a.decoupled = decoupled_;
      std::vector<AdamBatch> batches;
      std::vector<std::pair<Tensor, Tensor>> copy_back;  // 16-bit parameter <- its f32 master weights
      for (size_t pi = 0; pi < param_groups()[gi].params.size(); ++pi) {
        Tensor& p = param_groups()[gi].params[pi];
        if (!p.grad().defined()) continue;
        Tensor target = p.detach(), g = p.grad().contiguous();
        if (state_dtype(p) != p.dtype()) {
          target = master_weights(gi, pi);
          g = g.to(target.dtype());
          copy_back.emplace_back(p, target);
        }
        auto it = std::find_if(batches.begin(), batches.end(),
                               [&](const AdamBatch& b) { return b.dtype == target.dtype() && b.device == target.device(); });
        if (it == batches.end()) it = batches.insert(batches.end(), AdamBatch{target.dtype(), target.device(), {}, {}, {}, {}});
        it->params.push_back(target);
        it->grads.push_back(g);
        it->exp_avg.push_back(state(gi, pi, "exp_avg"));
        it->exp_avg_sq.push_back(state(gi, pi, "exp_avg_sq"));
      }
      for (AdamBatch& b : batches) adam_update_multi_(b.params, b.grads, b.exp_avg, b.exp_avg_sq, a);
      for (auto& [p, master] : copy_back) p.copy_(master);
    }
    return;
  }
  for_each_update([this](size_t gi, size_t pi, Tensor& p, Tensor g, const OptimOptions& o) {
    // One fused kernel per parameter: p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
    OptimizerAttrs a;
    a.lr = o.lr, a.weight_decay = o.weight_decay, a.beta1 = o.beta1, a.beta2 = o.beta2, a.eps = o.eps;
    a.bias_correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(steps_));
    a.bias_correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(steps_));
    a.decoupled = decoupled_;
    adam_update_(p, g.contiguous(), state(gi, pi, "exp_avg"), state(gi, pi, "exp_avg_sq"), a);
  });
}

void RMSprop::step() {
  for_each_update([this](size_t gi, size_t pi, Tensor& p, Tensor g, const OptimOptions& o) {
    if (o.weight_decay != 0) g = add(g, mul(p, o.weight_decay));
    Tensor& sq = state(gi, pi, "square_avg");
    sq.copy_(add(mul(sq, o.alpha), mul(square(g), 1.0 - o.alpha)));
    Tensor update = div(g, add(sqrt(sq), o.eps));
    if (o.momentum > 0) {
      Tensor& buf = state(gi, pi, "momentum_buffer");
      buf.copy_(add(mul(buf, o.momentum), update));
      update = buf;
    }
    p.sub_(mul(update, o.lr));
  });
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<Tensor> params, OptimOptions options) {
  if (name == "sgd") return std::make_unique<SGD>(std::move(params), options);
  if (name == "adam") return std::make_unique<Adam>(std::move(params), options);
  if (name == "adamw") return std::make_unique<AdamW>(std::move(params), options);
  if (name == "rmsprop") return std::make_unique<RMSprop>(std::move(params), options);
  throw Error("optimizer: unknown optimizer '" + name + "' (sgd, adam, adamw, rmsprop)");
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<ParamGroup> groups) {
  if (name == "sgd") return std::make_unique<SGD>(std::move(groups));
  if (name == "adam") return std::make_unique<Adam>(std::move(groups));
  if (name == "adamw") return std::make_unique<AdamW>(std::move(groups));
  if (name == "rmsprop") return std::make_unique<RMSprop>(std::move(groups));
  throw Error("optimizer: unknown optimizer '" + name + "' (sgd, adam, adamw, rmsprop)");
}

double StepLR::factor(int64_t step) const { return std::pow(gamma_, static_cast<double>(step / std::max<int64_t>(step_size_, 1))); }

double MultiStepLR::factor(int64_t step) const {
  const auto passed = std::count_if(milestones_.begin(), milestones_.end(), [step](int64_t m) { return step >= m; });
  return std::pow(gamma_, static_cast<double>(passed));
}

double CosineLR::factor(int64_t step) const {
  const double t = std::min(1.0, static_cast<double>(step) / static_cast<double>(std::max<int64_t>(total_, 1)));
  return min_ + (1.0 - min_) * 0.5 * (1.0 + std::cos(M_PI * t));
}

double OneCycleLR::factor(int64_t step) const {
  const double up = pct_ * static_cast<double>(total_);
  const double s = static_cast<double>(step);
  auto cosine = [](double from, double to, double t) { return to + (from - to) * 0.5 * (1.0 + std::cos(M_PI * std::clamp(t, 0.0, 1.0))); };
  if (s <= up) return cosine(1.0 / div_, 1.0, up > 0 ? s / up : 1.0);
  return cosine(1.0, 1.0 / (div_ * final_div_), (s - up) / std::max(1.0, static_cast<double>(total_) - up));
}

double LinearWarmup::factor(int64_t step) const {
  if (step >= warmup_) return 1.0;
  return start_ + (1.0 - start_) * static_cast<double>(step) / static_cast<double>(std::max<int64_t>(warmup_, 1));
}

double ChainedLR::factor(int64_t step) const {
  double f = 1.0;
  for (const auto& p : parts_) f *= p->factor(step);
  return f;
}

Scheduler::Scheduler(Optimizer& opt, std::shared_ptr<LRSchedule> schedule) : opt_(opt), schedule_(std::move(schedule)) {
  for (const ParamGroup& g : opt_.param_groups()) base_lrs_.push_back(g.options.lr);
  apply();
}

void Scheduler::step() {
  ++step_;
  apply();
}

void Scheduler::set_step(int64_t step) {
  step_ = step;
  apply();
}

void Scheduler::apply() {
  const double f = schedule_->factor(step_);
  for (size_t g = 0; g < base_lrs_.size(); ++g) opt_.param_groups()[g].options.lr = base_lrs_[g] * f;
}

double Scheduler::lr(size_t group) const { return opt_.param_groups().at(group).options.lr; }

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  double total = 0;
  for (const Tensor& p : params) {
    if (p.grad().defined()) total += sum(square(p.grad().to(DType::f64))).item<double>();
  }
  const double norm = std::sqrt(total);
  const double scale = max_norm / (norm + 1e-6);
  if (scale < 1.0) {
    for (const Tensor& p : params) {
      if (p.grad().defined()) p.grad().mul_(scale);
    }
  }
  return norm;
}

void clip_grad_value_(const std::vector<Tensor>& params, double value) {
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    if (p.grad().defined()) p.grad().copy_(clamp(p.grad(), -value, value));
  }
}

}  // namespace tessera::nn
