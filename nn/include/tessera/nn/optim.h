#pragma once
// Optimizers with parameter groups (each group may override any option), learning-rate
// schedules and gradient clipping. Updates run under NoGradGuard with public ops, so they
// work on every backend and are deterministic.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/nn/module.h"

namespace tessera::nn {

/** Hyper-parameters; each optimizer reads the fields it documents. */
struct OptimOptions {
  double lr = 1e-3;
  double weight_decay = 0.0;
  double momentum = 0.0;   // SGD, RMSprop
  double dampening = 0.0;  // SGD
  bool nesterov = false;   // SGD
  double beta1 = 0.9, beta2 = 0.999;  // Adam, AdamW
  double eps = 1e-8;       // Adam, AdamW, RMSprop
  double alpha = 0.99;     // RMSprop smoothing
};

struct ParamGroup {
  std::vector<Tensor> params;
  OptimOptions options;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;
  /** Applies one update from the parameters' current gradients (missing gradients are skipped). */
  virtual void step() = 0;
  /** Clears every parameter's gradient. */
  void zero_grad();
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  /** Per-parameter state tensors and per-group hyper-parameters as "group.<g>.<key>". */
  StateDict state_dict() const;
  /** Restores what state_dict() produced for an optimizer over the same parameters. */
  void load_state_dict(const StateDict& state);
  virtual std::string name() const = 0;
  int64_t steps() const { return steps_; }

 protected:
  /** State tensor `key` of parameter `p` in group `g`, created as zeros like the parameter. */
  Tensor& state(size_t g, size_t p, const std::string& key);
  bool has_state(size_t g, size_t p, const std::string& key) const;
  /**
   * Counts a step and calls fn(group, index, param, grad, options) for every parameter with a
   * gradient. An f16/bf16 parameter is updated through an f32 master copy kept in the optimizer
   * state ("master"), with its gradient in f32, and then rounded back into the parameter: the
   * update never loses the small steps a 16-bit weight cannot hold.
   */
  template <class F> void for_each_update(F&& fn) {
    NoGradGuard no_grad;
    ++steps_;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
        Tensor& p = groups_[gi].params[pi];
        if (!p.grad().defined()) continue;
        if (state_dtype(p) == p.dtype()) {
          fn(gi, pi, p, p.grad(), groups_[gi].options);
          continue;
        }
        Tensor& master = master_weights(gi, pi);
        fn(gi, pi, master, p.grad().to(master.dtype()), groups_[gi].options);
        p.copy_(master);
      }
    }
  }
  /** The dtype of a parameter's optimizer state: f32 for f16/bf16 parameters, else its own. */
  static DType state_dtype(const Tensor& param);
  /** The f32 master copy of low-precision parameter (g, p), created from the parameter. */
  Tensor& master_weights(size_t g, size_t p);
  int64_t steps_ = 0;

 private:
  std::vector<ParamGroup> groups_;
  std::map<std::string, Tensor> state_;
};

/** SGD with momentum, dampening, Nesterov momentum and L2 weight decay (PyTorch semantics). */
class SGD : public Optimizer {
 public:
  using Optimizer::Optimizer;
  SGD(std::vector<Tensor> params, OptimOptions options) : Optimizer({{std::move(params), options}}) {}
  explicit SGD(std::vector<ParamGroup> groups) : Optimizer(std::move(groups)) {}
  void step() override;
  std::string name() const override { return "sgd"; }
};

/** Adam; with `decoupled` it is AdamW (weight decay applied to the weights, not the gradient). */
class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, bool decoupled = false) : Optimizer(std::move(groups)), decoupled_(decoupled) {}
  Adam(std::vector<Tensor> params, OptimOptions options, bool decoupled = false)
      : Optimizer({{std::move(params), options}}), decoupled_(decoupled) {}
  void step() override;
  std::string name() const override { return decoupled_ ? "adamw" : "adam"; }

 private:
  bool decoupled_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, OptimOptions options) : Adam(std::move(params), options, true) {}
  explicit AdamW(std::vector<ParamGroup> groups) : Adam(std::move(groups), true) {}
};

class RMSprop : public Optimizer {
 public:
  using Optimizer::Optimizer;
  RMSprop(std::vector<Tensor> params, OptimOptions options) : Optimizer({{std::move(params), options}}) {}
  explicit RMSprop(std::vector<ParamGroup> groups) : Optimizer(std::move(groups)) {}
  void step() override;
  std::string name() const override { return "rmsprop"; }
};

/** Builds "sgd", "adam", "adamw" or "rmsprop" over `params`; throws on an unknown name. */
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<Tensor> params, OptimOptions options);
/** The same over parameter groups, each with its own options (LanguageModel::param_groups). */
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<ParamGroup> groups);

// ---- learning-rate schedules: lr = base_lr * factor(step) ----

class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  /** Multiplier of the base learning rate after `step` scheduler steps. */
  virtual double factor(int64_t step) const = 0;
};

class StepLR : public LRSchedule {
 public:
  StepLR(int64_t step_size, double gamma) : step_size_(step_size), gamma_(gamma) {}
  double factor(int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

class MultiStepLR : public LRSchedule {
 public:
  MultiStepLR(std::vector<int64_t> milestones, double gamma) : milestones_(std::move(milestones)), gamma_(gamma) {}
  double factor(int64_t step) const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

/** Cosine from 1 to min_factor over total steps. */
class CosineLR : public LRSchedule {
 public:
  CosineLR(int64_t total, double min_factor = 0.0) : total_(total), min_(min_factor) {}
  double factor(int64_t step) const override;

 private:
  int64_t total_;
  double min_;
};

/** One-cycle: cosine warm-up from 1/div to 1 over pct_start, then cosine down to 1/(div*final_div). */
class OneCycleLR : public LRSchedule {
 public:
  OneCycleLR(int64_t total, double pct_start = 0.3, double div = 25.0, double final_div = 1e4)
      : total_(total), pct_(pct_start), div_(div), final_div_(final_div) {}
  double factor(int64_t step) const override;

 private:
  int64_t total_;
  double pct_, div_, final_div_;
};

/** Linear ramp from start_factor to 1 over `warmup` steps, then 1. */
class LinearWarmup : public LRSchedule {
 public:
  LinearWarmup(int64_t warmup, double start_factor = 0.0) : warmup_(warmup), start_(start_factor) {}
  double factor(int64_t step) const override;

 private:
  int64_t warmup_;
  double start_;
};

/** Product of several schedules (e.g. warm-up then cosine). */
class ChainedLR : public LRSchedule {
 public:
  explicit ChainedLR(std::vector<std::shared_ptr<LRSchedule>> parts) : parts_(std::move(parts)) {}
  double factor(int64_t step) const override;

 private:
  std::vector<std::shared_ptr<LRSchedule>> parts_;
};

/** Drives an optimizer's learning rates from a schedule; call step() once per step (or epoch). */
class Scheduler {
 public:
  Scheduler(Optimizer& opt, std::shared_ptr<LRSchedule> schedule);
  void step();
  int64_t steps() const { return step_; }
  /** Jumps to `step` (used when resuming). */
  void set_step(int64_t step);
  double lr(size_t group = 0) const;

 private:
  void apply();
  Optimizer& opt_;
  std::shared_ptr<LRSchedule> schedule_;
  std::vector<double> base_lrs_;
  int64_t step_ = 0;
};

// ---- clipping ----

/** Scales all gradients so their global L2 norm is at most max_norm; returns the norm before. */
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);
/** Clamps every gradient element to [-value, value]. */
void clip_grad_value_(const std::vector<Tensor>& params, double value);

}  // namespace tessera::nn
