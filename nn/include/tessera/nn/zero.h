#pragma once
// ZeRO stage 1: the optimizer state sharded across ranks. Each rank keeps the state (Adam's
// moments, SGD's momentum, master weights) of 1/world of the parameters only. A step
// reduce-scatters the gradients (each rank receives the reduced slice it owns), updates its
// slice with an ordinary optimizer, and all-gathers the updated parameters, so every rank ends
// with identical full parameters. Use it instead of DDP's gradient all-reduce (not on top of
// it): the reduce-scatter is the gradient synchronisation.
#include <functional>
#include <memory>

#include "tessera/dist.h"
#include "tessera/nn/optim.h"

namespace tessera::nn {

class ZeroRedundancyOptimizer {
 public:
  /** Builds the inner optimizer over this rank's shard (a flat tensor), e.g.
   *  [](std::vector<ParamGroup> g) { return std::make_unique<Adam>(std::move(g)); } */
  using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;

  /**
   * `params` (floating, one dtype and device; every rank passes the same list) are flattened in
   * order and split into world_size equal slices (zero-padded). Rank 0's values are broadcast
   * first. `reduce`: mean averages the ranks' gradients (as DDP); sum adds them (for losses
   * scaled by local / global batch). One option set for all parameters.
   */
  ZeroRedundancyOptimizer(std::vector<Tensor> params, OptimOptions options, const Factory& make, dist::ProcessGroup& group,
                          dist::ReduceOp reduce = dist::ReduceOp::mean);

  /** Reduce-scatter of the gradients (missing ones count as zero), the shard's update,
   *  all-gather of the parameters. A collective: every rank calls it. */
  void step();
  void zero_grad();
  /** The first and one-past-last flat element this rank owns. */
  int64_t shard_begin() const { return shard_ * group_.rank(); }
  int64_t shard_end() const { return std::min(numel_, shard_ * (group_.rank() + 1)); }
  const Optimizer& inner() const { return *inner_; }

  /**
   * The whole optimizer state with every shard gathered: flat state tensors of the total
   * parameter count ("state.0.0.exp_avg" ...), "steps" and "group.0.lr" — the same on every
   * rank, independent of the world size. A collective; save it from rank 0.
   */
  StateDict state_dict() const;
  /** Restores a state_dict() written under any world size: each rank takes its slice. */
  void load_state_dict(const StateDict& state);

 private:
  std::vector<Tensor> params_;
  dist::ProcessGroup& group_;
  dist::ReduceOp reduce_;
  int64_t numel_ = 0, shard_ = 0;
  Tensor shard_param_;  // this rank's slice of the flat parameters (what inner_ updates)
  std::unique_ptr<Optimizer> inner_;
};

}  // namespace tessera::nn
