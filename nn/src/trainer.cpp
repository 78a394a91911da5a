#include "tessera/nn/trainer.h"

#include "tessera/nn/ddp.h"
#include "tessera/nn/fsdp.h"
#include "tessera/nn/model_parallel.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <utility>

#include "tessera/graph.h"
#include "tessera/profiler.h"

namespace tessera::nn {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void progress_bar(int64_t epoch, int64_t epochs, int64_t done, int64_t total, double loss) {
  const int width = 30;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\repoch %lld/%lld [%.*s%*s] %lld/%lld loss %.4f", static_cast<long long>(epoch),
               static_cast<long long>(epochs), filled, "==============================", width - filled, "",
               static_cast<long long>(done), static_cast<long long>(total), loss);
  std::fflush(stderr);
}

// Forward + backward as one captured graph. Step 1 runs eagerly (warm-up: lazily created state
// and library handles must not be created inside a capture); the next step with a batch of the
// same shape is captured, then replayed for every batch of that shape: the batch is copied into
// the captured input tensors, the replay rewrites the captured loss and gradients, and the
// gradients are handed back to the parameters (zero_grad dropped them) for the eager optimizer.
class StepGraph {
 public:
  StepGraph(std::vector<Tensor> params, std::function<Tensor(const Batch&)> body)
      : params_(std::move(params)), body_(std::move(body)), graph_(params_.front().device()) {}

  Tensor step(const Batch& b, int64_t optimizer_steps) {
    if (optimizer_steps == 0 || (graph_.captured() && (b.x.shape() != x_.shape() || b.y.shape() != y_.shape()))) return body_(b);
    if (!graph_.captured()) capture(b);
    x_.copy_(b.x);
    y_.copy_(b.y);
    graph_.replay();
    ++replays_;
    for (size_t i = 0; i < params_.size(); ++i) params_[i].set_grad(grads_[i]);
    return loss_;
  }
  int64_t take_replays() { return std::exchange(replays_, 0); }

 private:
  void capture(const Batch& b) {
    x_ = empty_like(b.x);
    y_ = empty_like(b.y);
    for (Tensor& p : params_) p.set_grad(Tensor());
    graph_.capture_begin();
    try {
      loss_ = body_(Batch{x_, y_});
    } catch (...) {
      graph_.capture_end();
      throw;
    }
    graph_.capture_end();
    for (const Tensor& p : params_) grads_.push_back(p.grad());
  }

  std::vector<Tensor> params_;
  std::function<Tensor(const Batch&)> body_;
  DeviceGraph graph_;
  Tensor x_, y_, loss_;
  std::vector<Tensor> grads_;
  int64_t replays_ = 0;
};
}  // namespace

Tensor Trainer::forward_backward(const Batch& b, int64_t grad_accumulation) {
  Tensor loss;
  {
    const profile::Scope scope("forward");
    const AutocastGuard autocast(precision_ == DType::f32 ? DType::bf16 : precision_, precision_ != DType::f32);
    loss = loss_(run_model(b.x), b.y);
    if (grad_accumulation > 1) loss = div(loss, static_cast<double>(grad_accumulation));
  }
  const profile::Scope scope("backward");
  (scaler_ ? scaler_->scale(loss) : loss).backward();
  return loss;
}

Tensor Trainer::run_model(const Tensor& x) { return fsdp_ ? fsdp_->forward(x) : model_.forward(x); }

Tensor next_token_loss(const Tensor& logits, const Tensor& targets) {
  TESSERA_CHECK(logits.dim() == 3 && targets.dim() == 2 && logits.size(0) == targets.size(0) && logits.size(1) == targets.size(1),
                "next_token_loss", "expected logits [B, T, V] and targets [B, T], got ", shape_str(logits.shape()), " and ",
                shape_str(targets.shape()));
  return cross_entropy(logits.reshape({-1, logits.size(2)}), targets.reshape({-1}));
}

Trainer::Trainer(Module& model, Optimizer& optimizer, Scheduler* scheduler, LossFn loss)
    : model_(model), optimizer_(optimizer), scheduler_(scheduler), loss_(std::move(loss)) {
  if (!loss_) loss_ = [](const Tensor& out, const Tensor& y) { return cross_entropy(out, y); };
}

EvalStats Trainer::evaluate(BatchSource& loader) {
  NoGradGuard no_grad;
  const bool was_training = model_.is_training();
  model_.eval();
  EvalStats s;
  double loss_sum = 0;
  int64_t correct = 0;
  loader.start_epoch(0);
  Batch b;
  while (loader.next(b)) {
    const AutocastGuard autocast(precision_ == DType::f32 ? DType::bf16 : precision_, precision_ != DType::f32);
    if (model_parallel_) {  // the loss only: split logits have no argmax here
      loss_sum += model_parallel_->eval_batch(b) * static_cast<double>(b.y.numel());
      s.samples += b.y.numel();
      continue;
    }
    const Tensor out = run_model(b.x);
    const int64_t n = b.y.numel();
    loss_sum += loss_(out, b.y).item<double>() * static_cast<double>(n);
    correct += sum(eq(argmax(out, out.dim() - 1), b.y)).item<int64_t>();
    s.samples += n;
  }
  model_.train(was_training);
  TESSERA_CHECK(s.samples > 0, "evaluate", "the evaluation split is empty: there is no accuracy to report (check --test-limit and the data)");
  s.loss = s.samples ? loss_sum / static_cast<double>(s.samples) : 0;
  s.accuracy = model_parallel_ ? NAN : s.samples ? static_cast<double>(correct) / static_cast<double>(s.samples) : 0;
  return s;
}

std::vector<EpochStats> Trainer::fit(BatchSource& train, BatchSource* test, const TrainOptions& o) {
  TESSERA_CHECK(o.epochs >= 1 && o.grad_accumulation >= 1, "Trainer", "epochs and grad_accumulation must be >= 1");
  TESSERA_CHECK(o.precision == DType::f32 || o.precision == DType::bf16 || o.precision == DType::f16, "Trainer",
                "precision must be float32, bfloat16 or float16, got ", o.precision);
  TESSERA_CHECK(!(o.ddp && o.fsdp), "Trainer",
                "both DDP and fully sharded training given: pick one (fully sharded training is data parallel)");
  TESSERA_CHECK(
      !(o.fsdp && o.scaler), "Trainer",
      "loss scaling with fully sharded training: each rank would decide on its own shards whether to skip a step; train in bfloat16");
  TESSERA_CHECK(!(o.fsdp && &o.fsdp->module() != &model_), "Trainer", "the fully sharded wrapper wraps another model than the Trainer's");
  ModelParallel* const mp = o.model_parallel;
  TESSERA_CHECK(!(mp && (o.ddp || o.fsdp)), "Trainer",
                "model-parallel training with DDP or fully sharded training: its data-parallel replicas are synchronised by the "
                "model-parallel engine");
  TESSERA_CHECK(!(mp && o.scaler), "Trainer", "loss scaling with model-parallel training: train in bfloat16");
  TESSERA_CHECK(!(mp && &mp->local_module() != &model_), "Trainer", "the model-parallel engine holds another model than the Trainer's");
  precision_ = o.precision;
  scaler_ = o.scaler;
  fsdp_ = o.fsdp;
  model_parallel_ = mp;
  // Under DDP or FSDP: the data-parallel wrapper's collectives (the figures every rank reports
  // alike, agreed decisions); the rank 0 writes checkpoints (sharded or split, every rank gathers first).
  const bool parallel = o.ddp || o.fsdp || mp;
  const auto over_ranks = [&](double v) {
    return o.ddp ? o.ddp->mean_over_ranks(v) : o.fsdp ? o.fsdp->mean_over_ranks(v) : mp->mean_over_ranks(v);
  };
  const auto any_rank = [&](bool flag) { return o.ddp ? o.ddp->any_rank(flag) : o.fsdp ? o.fsdp->any_rank(flag) : mp->any_rank(flag); };
  // Ranks that see their own data: a model-parallel replica's ranks share its batches.
  const int world = o.ddp ? o.ddp->world_size() : o.fsdp ? o.fsdp->world_size() : mp ? mp->layout().data : 1;
  const bool writer = o.ddp ? o.ddp->rank() == 0 : true;
  std::unique_ptr<StepGraph> graph;
  if (o.graph && o.grad_accumulation == 1 && !scaler_ && !parallel && !model_.parameters().empty() &&
      DeviceGraph::supported(model_.parameters().front().device())) {
    graph = std::make_unique<StepGraph>(model_.parameters(), [this](const Batch& batch) { return forward_backward(batch, 1); });
  }
  int64_t first_epoch = 0;
  if (o.resume && !o.checkpoint.empty() && std::filesystem::exists(o.checkpoint)) {
    first_epoch = load_checkpoint(o.checkpoint, o.reset_optimizer);
    if (o.resume_lr && !scheduler_) {
      for (ParamGroup& g : optimizer_.param_groups()) g.options.lr = *o.resume_lr;
    }
  }
  const AnomalyGuard anomaly(o.detect_anomaly || anomaly_detection());
  std::vector<EpochStats> history;
  for (int64_t epoch = first_epoch; epoch < o.epochs; ++epoch) {
    model_.train();
    EpochStats st;
    st.epoch = epoch + 1;
    train.start_epoch(epoch);
    const auto t0 = Clock::now();
    double loss_sum = 0, step_seconds = 0, window_loss = 0;
    int64_t batches = 0, samples = 0, steps = 0, finite_batches = 0, window_batches = 0;
    bool poisoned = false;  // a non-finite loss or gradient in the current accumulation window
    Batch b;
    optimizer_.zero_grad();
    auto step_start = Clock::now();
    while (train.next(b)) {
      if (batches % o.grad_accumulation == 0) step_start = Clock::now();
      std::optional<profile::Scope> step_scope(std::in_place, "train step", "step");
      // Under DDP only the window's last backward reduces gradients; the others accumulate.
      const bool closes_window = (batches + 1) % o.grad_accumulation == 0 || batches + 1 == train.batches();
      double l = 0;
      if (mp) {
        const profile::Scope scope("forward and backward");
        const AutocastGuard autocast(precision_ == DType::f32 ? DType::bf16 : precision_, precision_ != DType::f32);
        l = mp->train_batch(b, 1.0 / static_cast<double>(o.grad_accumulation));
      } else {
        Tensor loss;
        if (o.ddp && !closes_window) {
          const auto local = o.ddp->no_sync();
          loss = forward_backward(b, o.grad_accumulation);
        } else {
          loss = graph ? graph->step(b, optimizer_.steps()) : forward_backward(b, o.grad_accumulation);
        }
        const profile::Scope scope("loss to host");
        l = loss.item<double>() * static_cast<double>(o.grad_accumulation);
      }
      ++batches;
      samples += b.y.numel();
      window_loss += l;
      ++window_batches;
      // With a GradScaler a non-finite loss is its business (it skips the step and backs off).
      if (!std::isfinite(l) && !scaler_) {
        // Under DDP every rank must take the same decision: it is made at the step, together.
        if (o.on_nonfinite == OnNonFinite::stop && !parallel) throw_nonfinite("loss", l, epoch, batches, o);
        poisoned = true;
      } else if (std::isfinite(l)) {
        loss_sum += l;
        ++finite_batches;
      }
      const bool last = batches == train.batches();
      if (batches % o.grad_accumulation == 0 || last) {
        const profile::Scope scope("optimizer");
        if (parallel) {
          if (o.ddp) o.ddp->finish_gradient_sync();
          else if (o.fsdp) o.fsdp->finish_gradient_sync();
          else mp->finish_gradient_sync();
          const bool any_poisoned = any_rank(poisoned);
          if (any_poisoned && o.on_nonfinite == OnNonFinite::stop) throw_nonfinite("loss (on some rank)", NAN, epoch, batches, o);
          poisoned = any_poisoned;
        }
        if (scaler_) scaler_->unscale_(optimizer_);  // clipping sees the true gradients
        // A finite loss can still back-propagate to an Inf gradient (an overflow in backward).
        // Sharded, each rank sees its shards: the ranks agree.
        if (!scaler_ && !poisoned && (o.fsdp || mp ? any_rank(!grads_finite()) : !grads_finite())) {
          if (o.on_nonfinite == OnNonFinite::stop) throw_nonfinite("gradient", NAN, epoch, batches, o);
          poisoned = true;
        }
        if (o.clip_norm > 0 && !poisoned) {
          if (o.fsdp) o.fsdp->clip_grad_norm_(o.clip_norm);
          else if (mp) mp->clip_grad_norm_(o.clip_norm);
          else clip_grad_norm_(model_.parameters(), o.clip_norm);
        }
        if (poisoned) {
          ++st.skipped_steps;  // the parameters never see this window's gradients
          poisoned = false;
        } else if (scaler_) {
          scaler_->step(optimizer_);
          scaler_->update();
        } else {
          optimizer_.step();
        }
        optimizer_.zero_grad();
        if (scheduler_) scheduler_->step();
        step_seconds += since(step_start);
        ++steps;
        if (o.on_step_end) o.on_step_end(optimizer_.steps(), window_loss / static_cast<double>(window_batches));
        window_loss = 0;
        window_batches = 0;
      }
      step_scope.reset();
      if (o.progress) progress_bar(epoch + 1, o.epochs, batches, train.batches(), loss_sum / static_cast<double>(batches));
    }
    if (o.progress) std::fprintf(stderr, "\n");
    st.seconds = since(t0);
    st.train_loss = finite_batches ? loss_sum / static_cast<double>(finite_batches) : NAN;
    st.samples_per_second = st.seconds > 0 ? static_cast<double>(samples) / st.seconds : 0;
    st.step = optimizer_.steps();
    st.lr = optimizer_.param_groups().front().options.lr;
    if (parallel) {  // every rank reports the same figures: the loss over all ranks, the throughput of all
      st.train_loss = over_ranks(st.train_loss);
      st.samples_per_second = over_ranks(st.samples_per_second) * world;
    }
    st.step_ms = steps ? 1e3 * step_seconds / static_cast<double>(steps) : 0;
    st.graph_replays = graph ? graph->take_replays() : 0;
    // --on-nonfinite skip keeps a run alive through a few poisoned steps, not through a diverged
    // one: past the allowed share of skipped steps, or with a non-finite evaluation, the run
    // fails (before its checkpoint replaces the last good one).
    TESSERA_CHECK(steps == 0 || static_cast<double>(st.skipped_steps) <= o.max_skipped_fraction * static_cast<double>(steps), "train",
                  st.skipped_steps, " of ", steps, " optimizer steps of epoch ", epoch + 1, " were skipped for non-finite values (more than ",
                  o.max_skipped_fraction * 100, "%): the run is diverging; lower the learning rate");
    if (test) {
      st.test = evaluate(*test);
      TESSERA_CHECK(std::isfinite(st.test.loss), "train", "the test loss is ", st.test.loss, " after epoch ", epoch + 1, " (step ", st.step,
                    "): the weights are not finite; lower the learning rate",
                    o.checkpoint.empty() ? "" : "; the checkpoint was not written");
    }
    if (!o.checkpoint.empty() && writer) save_checkpoint(o.checkpoint, epoch + 1, o.config, o.metadata);
    if (o.ddp) o.ddp->barrier();  // no rank reads a checkpoint rank 0 is still writing
    else if (o.fsdp) o.fsdp->barrier();
    else if (mp) mp->barrier();
    if (o.on_epoch_end) o.on_epoch_end(st);
    history.push_back(st);
  }
  if (o.ddp)
    TESSERA_CHECK(o.ddp->replicas_equal(), "train", "the ranks' parameters differ after training (gradients were not synchronised)");
  if (mp)
    TESSERA_CHECK(mp->replicas_equal(), "train",
                  "the data-parallel replicas' parameters differ after training (gradients were not synchronised)");
  return history;
}

bool Trainer::grads_finite() const {
  std::vector<Tensor> grads;  // what the optimizer would step (the shards, under FSDP)
  for (const ParamGroup& g : optimizer_.param_groups()) {
    for (const Tensor& p : g.params) grads.push_back(p.grad());
  }
  return all_finite(grads);
}

void Trainer::throw_nonfinite(const char* what, double value, int64_t epoch, int64_t batch, const TrainOptions& o) const {
  throw Error(detail::concat("train: non-finite ", what, std::isnan(value) ? "" : detail::concat(" (", value, ")"), " at step ",
                             optimizer_.steps() + 1, " (epoch ", epoch + 1, ", batch ", batch, "); stopped before the update reached the parameters",
                             o.checkpoint.empty() ? std::string() : "; the last checkpoint '" + o.checkpoint + "' is kept",
                             ". Lower the learning rate, use --on-nonfinite skip, or --detect-anomaly to find the op"));
}

CheckpointParts Trainer::checkpoint_parts() const {
  CheckpointParts parts;
  parts.model = &model_;
  parts.optimizer = &optimizer_;
  parts.scheduler = scheduler_;
  parts.scaler = scaler_;
  if (fsdp_) {
    parts.load_model_state = [f = fsdp_](const StateDict& state) { f->load_full_state_dict(state); };
    parts.load_optimizer_state = [f = fsdp_, &opt = optimizer_](const StateDict& state) { f->load_optimizer_state_dict(opt, state); };
  } else if (model_parallel_) {
    parts.load_model_state = [m = model_parallel_](const StateDict& state) { m->load_full_state_dict(state); };
    parts.load_optimizer_state = [m = model_parallel_, &opt = optimizer_](const StateDict& state) {
      m->load_optimizer_state_dict(opt, state);
    };
  }
  return parts;
}

void Trainer::save_checkpoint(const std::string& path, int64_t epochs_done, const std::string& config, const Metadata& extra) const {
  Metadata meta = extra;
  meta["config"] = config.empty() ? "{}" : config;
  CheckpointParts parts = checkpoint_parts();
  if (fsdp_) {  // gathered on every rank (collectives), written by rank 0
    StateDict model_state = fsdp_->full_state_dict(), optimizer_state = fsdp_->optimizer_state_dict(optimizer_);
    if (fsdp_->rank() != 0) return;
    parts.model_state = [m = std::move(model_state)] { return m; };
    parts.optimizer_state = [o = std::move(optimizer_state)] { return o; };
  } else if (model_parallel_) {  // the same: the stages' and shards' parts gathered under the whole model's names
    StateDict model_state = model_parallel_->full_state_dict(), optimizer_state = model_parallel_->optimizer_state_dict(optimizer_);
    if (model_parallel_->layout().rank != 0) return;
    parts.model_state = [m = std::move(model_state)] { return m; };
    parts.optimizer_state = [o = std::move(optimizer_state)] { return o; };
  }
  nn::save_checkpoint(path, parts, epochs_done, meta);
}

int64_t Trainer::load_checkpoint(const std::string& path, bool reset_optimizer) {
  return nn::load_checkpoint(path, checkpoint_parts(), reset_optimizer).epoch;
}

}  // namespace tessera::nn
