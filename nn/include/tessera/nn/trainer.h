#pragma once
// The training loop of every model: epochs over a BatchSource (images from a DataLoader, text
// windows from a WindowSource) with autocast and loss scaling, graph capture, the non-finite
// guard, gradient accumulation, clipping, a per-step LR schedule, data parallelism, evaluation,
// metrics, callbacks and atomic safetensors checkpoints from which a run resumes bit-identically.
// What differs between tasks is the model, the batches and the loss (LossFn).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tessera/nn/amp.h"
#include "tessera/nn/checkpoint.h"
#include "tessera/nn/data.h"
#include "tessera/nn/module.h"
#include "tessera/nn/optim.h"
#include "tessera/nn/serialize.h"

namespace tessera::nn {

class DistributedDataParallel;
class FullyShardedDataParallel;
class ModelParallel;

struct EvalStats {
  double loss = 0;      ///< mean over the targets (images, or tokens for a language model)
  double accuracy = 0;  ///< argmax over the output's last axis equals the target
  int64_t samples = 0;  ///< targets compared
};

struct EpochStats {
  int64_t epoch = 0;            ///< 1-based
  int64_t step = 0;             ///< optimizer steps done at the end of the epoch
  double train_loss = 0;        ///< mean over the epoch's batches (and over the ranks under DDP)
  double lr = 0;                ///< the first parameter group's learning rate at the end of the epoch
  EvalStats test;               ///< when a test loader is given
  double samples_per_second = 0;  ///< targets (images or tokens) per second, over all ranks under DDP
  double step_ms = 0;           ///< mean wall time of an optimizer step (forward + backward + update)
  double seconds = 0;           ///< wall time of the epoch's training part
  int64_t graph_replays = 0;    ///< steps run by replaying the captured graph (TrainOptions::graph)
  int64_t skipped_steps = 0;    ///< optimizer steps dropped for a non-finite loss or gradient (OnNonFinite::skip)
};

/** What fit() does when a loss or gradient is NaN or Inf. */
enum class OnNonFinite {
  stop,  ///< throw tessera::Error naming the step, before the update reaches the parameters
  skip,  ///< drop that optimizer step (its accumulated gradients) and go on
};

struct TrainOptions {
  int64_t epochs = 1;
  int64_t grad_accumulation = 1;   ///< batches per optimizer step
  double clip_norm = 0;            ///< global-norm clipping when > 0
  std::string checkpoint;          ///< path written after every epoch (empty: none)
  bool resume = false;             ///< continue from `checkpoint` when it exists
  bool progress = false;           ///< a live progress bar (for terminals); otherwise log lines
  std::string config;              ///< stored in checkpoints (JSON text)
  Metadata metadata;               ///< further checkpoint entries (a language model's config and vocabulary)
  DType precision = DType::f32;    ///< bf16 / f16: forward passes (training and evaluation) under AutocastGuard
  GradScaler* scaler = nullptr;    ///< dynamic loss scaling (for f16); its state goes into checkpoints
  /** Capture the forward and backward pass once (after one eager warm-up step) and replay it for
   *  every batch of the captured shape; the optimizer step stays eager. Falls back to eager
   *  steps where the device cannot capture, with gradient accumulation or loss scaling. */
  bool graph = false;
  OnNonFinite on_nonfinite = OnNonFinite::stop;
  /** OnNonFinite::skip: an epoch that skips more than this share of its optimizer steps fails. */
  double max_skipped_fraction = 0.5;
  bool detect_anomaly = false;     ///< autograd anomaly mode for the run: names the first op making a NaN/Inf
  bool reset_optimizer = false;    ///< resume: restore the model and counters, start the optimizer afresh
  /** resume: this learning rate replaces the checkpoint's (without a scheduler; a scheduler
   *  applies its schedule to the learning rate the optimizer was built with). */
  std::optional<double> resume_lr;
  /** Data-parallel training: gradients are synchronised through this wrapper of the model
   *  (no_sync for all but the last batch of an accumulation window), non-finite decisions are
   *  agreed across ranks, and only rank 0 writes the checkpoint. Each rank's loader must yield
   *  the same number of batches (its own shard of the data). */
  DistributedDataParallel* ddp = nullptr;
  /** Fully sharded training (ZeRO-3) instead of DDP: forward passes go through this wrapper of
   *  the model, whose sharded param_groups() the optimizer must be built on; non-finite decisions,
   *  clipping and the reported figures are agreed across ranks; checkpoints hold the gathered
   *  model and per-parameter optimizer state (every rank gathers, rank 0 writes), so they load
   *  under any world size or without sharding. Not with `ddp`, graph capture or loss scaling. */
  FullyShardedDataParallel* fsdp = nullptr;
  /** A model split across ranks (pipeline stages, tensor-parallel shards; data parallel over the
   *  rest): the Trainer's model is this rank's part (model_parallel->local_module()), each batch
   *  goes through its train_batch, gradients are synchronised, clipped by the whole model's
   *  norm and checked across all ranks. Evaluation reports the loss (accuracy is NaN: the logits
   *  are split). Checkpoints hold the whole model and its per-parameter optimizer state, gathered
   *  (every rank gathers, rank 0 writes): they resume under any layout or mode. Not with
   *  `ddp`/`fsdp`, graph capture or loss scaling. */
  ModelParallel* model_parallel = nullptr;
  std::function<void(const EpochStats&)> on_epoch_end;
  /** After each optimizer step: its number and the mean loss of its batches. */
  std::function<void(int64_t step, double loss)> on_step_end;
};

using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;
/** A language model's loss: cross entropy of logits [B, T, V] against next tokens [B, T]. */
Tensor next_token_loss(const Tensor& logits, const Tensor& targets);

class Trainer {
 public:
  /** `scheduler` may be null. The default loss is cross entropy on class indices. */
  Trainer(Module& model, Optimizer& optimizer, Scheduler* scheduler = nullptr, LossFn loss = {});
  std::vector<EpochStats> fit(BatchSource& train, BatchSource* test, const TrainOptions& options);
  /** Mean loss and accuracy (argmax over the output's last axis) in eval mode without recording gradients. */
  EvalStats evaluate(BatchSource& loader);

  /** Throws (and leaves `path` untouched) when a parameter or optimizer state is NaN or Inf.
   *  After a fully sharded or model-parallel fit() every rank must call it (it gathers); rank 0 writes. */
  void save_checkpoint(const std::string& path, int64_t epochs_done, const std::string& config, const Metadata& extra = {}) const;
  /**
   * Restores model, optimizer, scheduler, RNG and counters; returns the completed epochs. The
   * whole file is validated before anything changes: non-finite values, corrupt counters, a
   * different optimizer or missing optimizer state are errors (the last two unless
   * `reset_optimizer`, which keeps this optimizer's fresh state).
   */
  int64_t load_checkpoint(const std::string& path, bool reset_optimizer = false);

 private:
  Module& model_;
  Optimizer& optimizer_;
  Scheduler* scheduler_;
  LossFn loss_;
  DType precision_ = DType::f32;   // of the fit() in progress (evaluate() follows it)
  GradScaler* scaler_ = nullptr;   // of the fit() in progress (saved with checkpoints)
  FullyShardedDataParallel* fsdp_ = nullptr;  // of the last fit() (evaluate() and checkpoints follow it)
  ModelParallel* model_parallel_ = nullptr;   // of the last fit() (evaluate() and checkpoints follow it)
  Tensor run_model(const Tensor& x);
  CheckpointParts checkpoint_parts() const;
  Tensor forward_backward(const Batch& b, int64_t grad_accumulation);
  bool grads_finite() const;
  [[noreturn]] void throw_nonfinite(const char* what, double value, int64_t epoch, int64_t batch, const TrainOptions& o) const;
};

}  // namespace tessera::nn
