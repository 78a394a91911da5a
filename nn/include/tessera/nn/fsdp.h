#pragma once
// Fully sharded data parallelism (ZeRO stage 3, as PyTorch's FSDP and DeepSpeed's ZeRO-3): each
// rank keeps 1/world of every parameter, of its gradient and of the optimizer state. A unit's
// parameters (a GPT block's) are all-gathered just before its forward and again before its
// backward -- the next unit's gather issued early -- and freed after each; gradients are
// reduce-scattered unit by unit while backward runs, so a rank never holds more than a couple of
// units' full parameters and gradients besides its shards.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tessera/dist.h"
#include "tessera/nn/module.h"
#include "tessera/nn/optim.h"

namespace tessera::nn {

struct FsdpOptions {
  /** mean: the ranks' gradients averaged (as DDP); sum: added (losses scaled by local / global batch). */
  dist::ReduceOp reduce = dist::ReduceOp::mean;
  /** Issue the next unit's all-gather when a unit starts (its forward, or its backward). */
  bool prefetch = true;
  /** Broadcast rank 0's parameters and buffers at construction. */
  bool broadcast_parameters = true;
  /** The module's parameters in optimizer groups (LanguageModel::param_groups: weight decay on
   *  matrices only): each unit keeps one flat shard per group, and param_groups() hands the
   *  optimizer the shards with each group's options. Empty: one group of every parameter. */
  std::vector<ParamGroup> param_groups;
  /** false: a unit, once gathered, stays gathered and its gradients accumulate unsharded until
   *  finish_gradient_sync(), which reduce-scatters each unit once (torch FSDP's
   *  reshard_after_forward=False with the gradient sync deferred). A pipeline stage runs its units
   *  once per micro-batch: resharding after each use costs each unit 2M all-gathers and M
   *  reduce-scatters a step, keeping costs 1 and 1, at the memory of the module's whole parameters
   *  and gradients during the step (parameters and optimizer state stay sharded between steps). */
  bool reshard_after_use = true;
  /** Parameters of the root unit each given a flat of its own (its first element at offset 0), so
   *  that two wrappers holding one weight shard it alike: a pipeline's tied token embedding on its
   *  first and last stage, each stage sharded over its own data-parallel group, sums the two
   *  stages' shard gradients element by element (shard_of()). */
  std::vector<Tensor> own_flat;
};

/** What the sharded step did since the last reset_stats() (for tests and logs). */
struct FsdpStats {
  int64_t all_gathers = 0;          ///< unit gathers issued (each unit twice a step: forward and backward)
  int64_t prefetched = 0;           ///< of those, issued ahead of the unit's start
  int64_t reduce_scatters = 0;      ///< unit gradient reductions
  int64_t peak_gathered_units = 0;  ///< most units (the root among them) holding full parameters at once
};

/**
 * Wraps `module` for fully sharded training over `group`. `units` are sub-modules gathered one at
 * a time (a GPT's blocks); they must be called through Module::operator() or Module::call (the
 * containers and GPT do), whose hooks gather and free them. Every other parameter forms the root
 * unit, gathered for the whole step. Each unit's parameters (one dtype and device) are flattened,
 * padded to a multiple of the world size and split; the module's parameter tensors stay the same
 * objects (now views into the unit's gathered buffer, whose memory is released between uses), so
 * move the module to its device before wrapping it, and build the optimizer on parameters().
 *
 * A step: forward(x), the loss's backward, finish_gradient_sync(), the optimizer's step on the
 * shards. Gradient accumulation: several forward/backward pairs before one finish (each backward
 * reduce-scatters what it produced; the shards' gradients add up).
 */
class FullyShardedDataParallel {
 public:
  struct State;
  FullyShardedDataParallel(std::shared_ptr<Module> module, dist::ProcessGroup& group, std::vector<std::shared_ptr<Module>> units,
                           FsdpOptions options = {});
  /** The module stays sharded (its weights released): take full_state_dict() first to keep them. */
  ~FullyShardedDataParallel();
  FullyShardedDataParallel(const FullyShardedDataParallel&) = delete;
  FullyShardedDataParallel& operator=(const FullyShardedDataParallel&) = delete;

  /** Gathers the root unit and runs the module (the units gather themselves). */
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  /** For a driver that calls the module itself (a pipeline runs its stage once per micro-batch):
   *  gathers the root unit and starts recording the units' order afresh, as forward() does. Call
   *  it once before a step's (or an evaluation's) first forward; finish_gradient_sync() frees the
   *  root. Several forwards and backwards in any interleaving may follow (1F1B): each unit gathers
   *  itself, and each backward reduce-scatters what it produced. */
  void begin_forward();
  Module& module() { return *module_; }

  /** This rank's shards, one flat tensor per unit and parameter group (the root's first). */
  std::vector<Tensor> parameters() const;
  /** The shards in the groups of FsdpOptions::param_groups, with their options: build the
   *  optimizer on these. */
  std::vector<ParamGroup> param_groups() const;
  /** Reduces what no backward reduced yet (parameters that got no gradient count as zeros), waits
   *  for every reduce-scatter, and frees every gathered unit. A collective: call it after backward. */
  void finish_gradient_sync();
  /** Keeps every unit gathered while alive (torch's summon_full_params): the bare module runs
   *  and reads its weights in between (export, generation, inspection). Writes to the gathered
   *  weights are not sharded back; use load_full_state_dict for that. */
  class FullParams {
   public:
    explicit FullParams(std::shared_ptr<State> state);
    ~FullParams();
    FullParams(FullParams&&) noexcept = default;
    FullParams(const FullParams&) = delete;
    FullParams& operator=(const FullParams&) = delete;
    FullParams& operator=(FullParams&&) = delete;

   private:
    std::shared_ptr<State> state_;
  };
  /** Gathers every unit (a collective: every rank calls it). */
  [[nodiscard]] FullParams summon_full_params() { return FullParams(state_); }

  /** The global gradient norm over every rank's shards, clipped to `max_norm` (a collective). */
  double clip_grad_norm_(double max_norm);
  /** The shard (this rank's slice of the flat) of `param`, one of FsdpOptions::own_flat. */
  Tensor shard_of(const Tensor& param) const;
  /** The sum of squares of this rank's shard gradients over the elements of the parameters that
   *  `counted` accepts (called with the module's parameter tensors), in f64; not a collective. For
   *  a global norm that counts each weight once where several wrappers hold replicas of some. */
  double grad_square_sum(const std::function<bool(const Tensor&)>& counted) const;

  /** The whole module's parameters and buffers, gathered (a collective; the same on every rank). */
  StateDict full_state_dict();
  /** Loads a whole-module state dict (from any world size, or a model trained without sharding):
   *  each rank keeps its slices. */
  void load_full_state_dict(const StateDict& state);
  /**
   * `optimizer` (built on param_groups()) with its state gathered and split back per parameter:
   * exactly the state_dict() of the same optimizer built on the unsharded model's groups
   * (FsdpOptions::param_groups, or module().parameters()), so a checkpoint loads under any world
   * size or without sharding. A collective.
   */
  StateDict optimizer_state_dict(const Optimizer& optimizer);
  /** The inverse: loads a per-parameter optimizer state (from any world size or mode). */
  void load_optimizer_state_dict(Optimizer& optimizer, const StateDict& state);

  int rank() const;
  int world_size() const;
  /** Units, the root among them. */
  int64_t unit_count() const;
  /** The mean of `value` over the ranks (a collective). */
  double mean_over_ranks(double value);
  /** True on every rank when `flag` is true on any (a collective). */
  bool any_rank(bool flag);
  void barrier();
  const FsdpStats& stats() const;
  void reset_stats();

 private:
  std::shared_ptr<Module> module_;
  std::shared_ptr<State> state_;
};

/** The units a model is sharded by when none are named: a GPT's blocks, a Sequential's layers;
 *  none for any other model (its whole parameter set gathered for each step, still sharded
 *  between steps, with gradients and optimizer state sharded throughout). */
std::vector<std::shared_ptr<Module>> default_fsdp_units(Module& model);

}  // namespace tessera::nn
