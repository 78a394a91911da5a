#pragma once
// A model split across ranks (pipeline stages, tensor-parallel shards) with data parallelism
// over the ranks left: the rank layout, and the step engine the Trainer drives in place of a
// plain forward and backward (TrainOptions::model_parallel).
//
// Ranks are laid out as Megatron-LM does: tensor parallel fastest (a tensor-parallel group is
// consecutive ranks, inside one node where its all-reduces are cheapest), then data parallel,
// then pipeline stages: rank = (stage * data + replica) * tensor + tensor_rank.
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/dist.h"
#include "tessera/nn/data.h"
#include "tessera/nn/fsdp.h"
#include "tessera/nn/models.h"
#include "tessera/nn/optim.h"
#include "tessera/nn/pipeline.h"

namespace tessera::nn {

/** Where one rank sits in a pipeline x tensor x data layout of `world` ranks. */
struct RankLayout {
  int world = 1, pipeline = 1, tensor = 1, data = 1;  ///< data = world / (pipeline * tensor)
  int rank = 0, stage = 0, tensor_rank = 0, replica = 0;
  /** Throws, saying why, when `world` ranks do not make pipeline x tensor groups. */
  static RankLayout of(int world, int rank, int pipeline, int tensor);
  /** One process holding every stage of a pipeline (each on its own device). */
  static RankLayout in_process(int pipeline);
  /** The rank of (stage, replica, tensor_rank). */
  int rank_of(int stage, int replica, int tensor_rank) const;
  /** "4 ranks = pipeline 2 x tensor parallel 2 x data parallel 1" and one line per rank. */
  std::string describe() const;
};

/** The Trainer's side of a model-parallel run: whole steps, agreed decisions, the global norm. */
class ModelParallel {
 public:
  virtual ~ModelParallel() = default;
  /** This rank's part of the model (train/eval mode). */
  virtual Module& local_module() = 0;
  /** The groups to build the optimizer on: local_module()'s parameters in the groups the unsplit
   *  model has (matrices decay, the rest do not), or under ZeRO-3 their shards in those groups. */
  virtual std::vector<ParamGroup> param_groups() = 0;
  /** Forward and backward of one batch, each loss scaled by `scale` before backward (gradient
   *  accumulation); returns the batch's unscaled mean loss, the same on every rank of the replica. */
  virtual double train_batch(const Batch& b, double scale) = 0;
  /** The batch's mean loss without gradients, on every rank. */
  virtual double eval_batch(const Batch& b) = 0;
  /** After an optimizer step's last backward: gradients averaged over the data-parallel replicas. */
  virtual void finish_gradient_sync() = 0;
  /** Scales every rank's gradients so the norm of the whole model's gradient (each weight counted
   *  once: replicated weights once, a tied pair once) is at most `max_norm`; returns that norm
   *  before clipping. A collective. */
  virtual double clip_grad_norm_(double max_norm) = 0;
  virtual bool any_rank(bool flag) = 0;              ///< over every rank
  virtual double mean_over_ranks(double value) = 0;  ///< over every rank
  virtual bool replicas_equal() = 0;                 ///< every data-parallel replica's parameters bitwise equal
  virtual void barrier() = 0;
  virtual const RankLayout& layout() const = 0;

  // Checkpoints hold the whole model, as an unsplit run writes it: they load under any layout,
  // world size or mode (single device, DDP, ZeRO-3) and into `tessera generate`.
  /** The whole model's parameters under the unsplit model's names, gathered from every stage and
   *  shard onto the CPU of every rank (a collective). */
  virtual StateDict full_state_dict() = 0;
  /** Loads a whole model's parameters (from any layout, or an unsplit run): each rank takes its
   *  part. Every key and shape is checked before anything changes. */
  virtual void load_full_state_dict(const StateDict& state) = 0;
  /** `optimizer` (built on local_module()'s parameters) with its state gathered per parameter of the
   *  whole model: the state_dict() of the same optimizer built on the unsplit model's
   *  weight_decay_groups (a collective). */
  virtual StateDict optimizer_state_dict(const Optimizer& optimizer) = 0;
  /** The inverse: each rank's optimizer takes the state of its parts. */
  virtual void load_optimizer_state_dict(Optimizer& optimizer, const StateDict& state) = 0;
};

struct GPTParallelOptions {
  int pipeline = 1, tensor = 1;
  int64_t micro_batches = 1;  ///< per replica's batch (pipeline > 1)
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  /** Interleaved: model chunks per stage (the GPT split into pipeline x chunks virtual stages,
   *  virtual stage v on stage v mod pipeline); 1 for the other schedules. */
  int64_t chunks = 1;
  /** ZeRO-3 over the data-parallel replicas (world / (pipeline x tensor) of them, at least 2):
   *  each rank keeps 1/data of its stage's (and tensor-parallel shard's) parameters, gradients
   *  and optimizer state, each block gathered for its forward and backward. */
  bool zero3 = false;
  /** With zero3: FsdpOptions::reshard_after_use, false to gather each block once a step (not per
   *  micro-batch) at the memory of the stage's whole parameters and gradients during the step. */
  bool zero3_reshard_after_use = true;
  /** The optimizer's options for param_groups() (its learning rate and weight decay). */
  OptimOptions optimizer;
};

/**
 * A GPT trained pipeline x tensor x data parallel. Built from the whole GPT (the same weights on
 * every rank: seed alike) which may be dropped afterwards: this rank keeps its stage (split_gpt)
 * and its tensor-parallel shards of it, moved to `device`. Build the whole GPT on the CPU (its
 * random initialisation is the same there) and no device holds more than its part. A pipeline of
 * ranks also takes the part of the GPT built for this rank's stage (GPT's GPTBlockRange
 * constructor, gpt_stage_blocks(layers, pipeline, layout.stage)): no host holds the whole either. Under one
 * process (a world of 1) a pipeline puts stage i on device i of `device`'s backend (emulated:0,
 * emulated:1). Loss: next-token cross entropy (vocab-parallel under tensor parallelism, the full
 * logits never formed).
 */
class GPTModelParallel final : public ModelParallel {
 public:
  GPTModelParallel(const GPT& whole, std::shared_ptr<dist::ProcessGroup> world, Device device, const GPTParallelOptions& options);
  Module& local_module() override { return *local_; }
  std::vector<ParamGroup> param_groups() override;
  double train_batch(const Batch& b, double scale) override;
  double eval_batch(const Batch& b) override;
  void finish_gradient_sync() override;
  double clip_grad_norm_(double max_norm) override;
  bool any_rank(bool flag) override;
  double mean_over_ranks(double value) override;
  bool replicas_equal() override;
  void barrier() override;
  const RankLayout& layout() const override { return layout_; }
  StateDict full_state_dict() override;
  void load_full_state_dict(const StateDict& state) override;
  StateDict optimizer_state_dict(const Optimizer& optimizer) override;
  void load_optimizer_state_dict(Optimizer& optimizer, const StateDict& state) override;
  /** The pipeline's schedule figures (null without a pipeline). */
  const Pipeline* pipeline() const { return pipeline_.get(); }
  /** The ZeRO-3 wrapper of local_module() over the data-parallel group (null without zero3). */
  const FullyShardedDataParallel* fully_sharded() const { return fsdp_.get(); }

 private:
  // One parameter of the unsplit GPT: its name, shape and place in weight_decay_groups.
  struct WholeParameter {
    std::string name;
    Shape shape;
    DType dtype;
    size_t group = 0, index = 0;
  };
  // One parameter this rank holds: which whole parameter it is (a part of), and whether it is the
  // last stage's copy of the tied token embedding (never gathered: stage 0 holds the original).
  struct LocalParameter {
    Tensor tensor;
    size_t whole = 0;
    bool tied_copy = false;
  };
  Tensor loss_of(const Tensor& logits, const Tensor& targets) const;
  void index_parameters(const GPT& whole);
  std::string whole_name_of(const std::string& local_name) const;
  bool owns(const LocalParameter& p) const;
  /** (the whole tensor's view, the local tensor's view) pairs: where this rank's part sits. */
  std::vector<std::pair<Tensor, Tensor>> pieces(const std::string& whole_name, const Tensor& whole, const Tensor& local) const;
  /** The whole parameter `i` (or a state shaped like it), each rank adding the parts it owns. */
  Tensor gather_whole(size_t i, const Tensor& mine, DType dtype);
  /** Under zero3: local_module() sharded over the data-parallel group (its blocks the units). */
  void shard_over_replicas(const GPTParallelOptions& options, const std::string& tied_name);
  RankLayout layout_;
  std::vector<WholeParameter> whole_;
  std::vector<LocalParameter> local_params_;
  std::shared_ptr<dist::ProcessGroup> world_, tensor_group_, pipeline_group_, data_group_;
  std::unique_ptr<Pipeline> pipeline_;
  ModulePtr local_;                   // the stage (ranked), the stages (in process) or the tensor-parallel GPT
  std::vector<Tensor> counted_once_;  // the gradients the global norm sums on this rank
  std::vector<ParamGroup> local_groups_;  // local_'s parameters in the unsplit model's groups
  int64_t chunks_ = 1;                    // model chunks per stage (interleaved): local_ holds them by index
  std::unique_ptr<FullyShardedDataParallel> fsdp_;
};

}  // namespace tessera::nn
