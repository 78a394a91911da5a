#pragma once
// Data parallelism over a dist::ProcessGroup: DistributedDataParallel (one model replica per
// rank, gradients all-reduced in buckets while backward runs) and DistributedSampler (each
// rank's deterministic shard of an epoch).
#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/dist.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

struct DdpOptions {
  /** Gradient bucket size: a bucket's all-reduce starts as soon as its last gradient is ready. */
  int64_t bucket_bytes = 25 << 20;
  /** mean (PyTorch's DDP): the average of the ranks' gradients; sum: their sum (for losses
   *  already scaled by local batch / global batch, which makes uneven shards exact). */
  dist::ReduceOp reduce = dist::ReduceOp::mean;
  /** Broadcast rank 0's parameters and buffers at construction. */
  bool broadcast_parameters = true;
};

/**
 * Wraps a module for data-parallel training. Construction broadcasts rank 0's parameters and
 * buffers (so every replica starts equal) and registers a gradient hook on every parameter.
 * During backward, each parameter's final gradient is copied into its bucket; a full bucket's
 * all-reduce is issued at once (buckets in a fixed order, the same on every rank), overlapping
 * the rest of backward. finish_gradient_sync() — call it after backward, before the optimizer
 * step — waits for the buckets and writes the reduced gradients back to .grad(). Parameters
 * that got no gradient this step contribute zeros.
 *
 * Batch-norm running statistics stay local to each rank (as in PyTorch without SyncBatchNorm);
 * call sync_buffers() to average them (e.g. before evaluation or a checkpoint).
 */
class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<Module> module, dist::ProcessGroup& group, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Tensor forward(const Tensor& x) { return module_->forward(x); }
  Tensor operator()(const Tensor& x) { return forward(x); }
  Module& module() { return *module_; }

  /** Waits for every bucket's all-reduce and stores the results in the parameters' .grad(). */
  void finish_gradient_sync();
  /** While held, backward passes accumulate gradients locally (gradient accumulation); the
   *  first backward after it ends reduces the accumulated sum. */
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }
  /** Averages floating buffers (batch-norm statistics) over ranks. */
  void sync_buffers();
  /** Number of gradient buckets (for tests and logs). */
  int64_t bucket_count() const;
  int rank() const;
  int world_size() const;
  /** True on every rank when `flag` is true on any (a collective: every rank calls it). */
  bool any_rank(bool flag);
  /** True on every rank when every rank's parameters are bitwise equal (a checksum of their
   *  bits compared over ranks; a collective). */
  bool replicas_equal();
  /** The mean of `value` over the ranks (a collective: every rank calls it). */
  double mean_over_ranks(double value);
  void barrier();

  struct State;

 private:
  std::shared_ptr<Module> module_;
  std::shared_ptr<State> state_;
};

/**
 * The indices of an epoch that belong to one rank: a permutation of [0, size) seeded by
 * (seed, epoch) — identical on every rank — padded by wrapping around to a multiple of the
 * world size (or truncated with drop_last), then every world_size-th index from rank.
 */
class DistributedSampler {
 public:
  DistributedSampler(int64_t size, int rank, int world_size, bool shuffle = true, uint64_t seed = 0, bool drop_last = false);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  std::vector<int64_t> indices() const;
  int64_t num_samples() const;

 private:
  int64_t size_;
  int rank_, world_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

}  // namespace tessera::nn
