#pragma once
// Tensor parallelism (Megatron-LM's layers): a layer's weight split across the ranks of a
// process group, each rank computing its slice. The conjugate pair around a parallel region:
//   copy_to_region      identity forward, all-reduce of the gradient backward ("f")
//   reduce_from_region  all-reduce forward, identity backward ("g")
// A ColumnParallelLinear (output features split) followed by a RowParallelLinear (input features
// split) is an MLP with one all-reduce forward and one backward. Every rank builds the same
// layers from the same full weights (from_full) or its own initialisation; sizes must divide by
// the group's world size.
#include <memory>

#include "tessera/dist.h"
#include "tessera/nn/language_model.h"
#include "tessera/nn/layers.h"

namespace tessera::nn::tp {

Tensor copy_to_region(const Tensor& x, dist::ProcessGroup& group);
Tensor reduce_from_region(const Tensor& x, dist::ProcessGroup& group);
/** Concatenates every rank's x along the last axis (rank order); backward: this rank's slice. */
Tensor gather_from_region(const Tensor& x, dist::ProcessGroup& group);

/** What the two split Linear layers share: y = x W^T + b with W [out, in] split along one axis
 *  across the group, this rank's part of W (and of b where it splits too), and from_full. */
class SplitLinear : public Module {
 public:
  /** Takes this rank's part of a full [out, in] weight and [out] bias. */
  void from_full(const Tensor& weight, const Tensor& bias);
  std::string describe() const override;
  Tensor weight, bias;

 protected:
  /** axis 0: output features split (the bias too); 1: input features split (the bias whole). */
  SplitLinear(const char* layer, int64_t in, int64_t out, int axis, std::shared_ptr<dist::ProcessGroup> group, bool bias, Placement p);
  const char* layer_;
  std::shared_ptr<dist::ProcessGroup> group_;
  int64_t in_, out_;
  int axis_;
};

/** W's rows (output features) split: this rank holds [out / world, in] and its part of b. */
class ColumnParallelLinear : public SplitLinear {
 public:
  ColumnParallelLinear(int64_t in, int64_t out, std::shared_ptr<dist::ProcessGroup> group, bool bias = true, bool gather_output = false,
                       Placement p = {});
  /** x replicated on every rank -> this rank's output features (or all of them, gathered). */
  Tensor forward(const Tensor& x) override;

 private:
  bool gather_output_;
};

/** W's columns (input features) split: this rank holds [out, in / world]; the bias is whole and
 *  added once after the all-reduce. */
class RowParallelLinear : public SplitLinear {
 public:
  RowParallelLinear(int64_t in, int64_t out, std::shared_ptr<dist::ProcessGroup> group, bool bias = true, Placement p = {});
  /** x: this rank's slice of the input features (a ColumnParallelLinear's output) -> y, whole. */
  Tensor forward(const Tensor& x) override;
};

/** An embedding table split by rows (vocabulary): this rank holds ids [rank * V/world, ...). */
class VocabParallelEmbedding : public Module {
 public:
  VocabParallelEmbedding(int64_t vocab, int64_t dim, std::shared_ptr<dist::ProcessGroup> group, Placement p = {});
  void from_full(const Tensor& weight);
  Tensor forward(const Tensor& ids) override;
  std::string describe() const override;
  Tensor weight;

 private:
  std::shared_ptr<dist::ProcessGroup> group_;
  int64_t vocab_, dim_;
};

/**
 * A GPT block with its heads and MLP split across the group (Megatron's layout): the fused QKV
 * projection column-parallel by heads, attention over this rank's heads, the output projection
 * row-parallel; fc column-parallel, fc_out row-parallel; the layer norms replicated. Two
 * all-reduces forward, two backward. Built from a whole block's weights; heads must divide by
 * the world size. No dropout (dropout on replicated activations needs one RNG stream per region).
 */
class ParallelGPTBlock : public Module {
 public:
  ParallelGPTBlock(const GPTBlock& whole, int64_t heads, std::shared_ptr<dist::ProcessGroup> group);
  /** x [B, T, C], replicated on every rank -> [B, T, C], replicated. */
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ParallelGPTBlock"; }
  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<ColumnParallelLinear> qkv, fc;
  std::shared_ptr<RowParallelLinear> proj, fc_out;

 private:
  std::shared_ptr<dist::ProcessGroup> group_;
  int64_t local_heads_;
};

/**
 * A whole GPT in Megatron's layout: the token embedding split by vocabulary and tied to the
 * output layer (so each rank's logits are its vocabulary slice, [B, T, V / world]), the blocks as
 * ParallelGPTBlocks, the position embedding and the final norm replicated. loss() pairs it with
 * vocab_parallel_cross_entropy: the full logits are never formed. Built from a whole GPT's
 * weights (no dropout); every rank feeds the same tokens.
 */
class ParallelGPT : public Module {
 public:
  ParallelGPT(const GPT& whole, std::shared_ptr<dist::ProcessGroup> group);
  /** tokens [B, T] -> this rank's logits [B, T, V / world]. */
  Tensor forward(const Tensor& tokens) override;
  /** The mean next-token cross entropy of forward(tokens) against targets [B, T]: the same value
   *  on every rank. */
  Tensor loss(const Tensor& tokens, const Tensor& targets);
  std::string name() const override { return "ParallelGPT"; }
  std::shared_ptr<VocabParallelEmbedding> tok;
  std::shared_ptr<Embedding> pos;
  std::vector<std::shared_ptr<ParallelGPTBlock>> blocks;
  std::shared_ptr<LayerNorm> ln_f;

 private:
  std::shared_ptr<dist::ProcessGroup> group_;
};

/**
 * Mean cross-entropy of logits split along the vocabulary ([N, V / world] on each rank, rank r
 * holding classes [r * V/world, ...)) against whole targets [N]: a max and two sums all-reduced,
 * never the full logits. The same value on every rank; gradients flow to each rank's slice.
 */
Tensor vocab_parallel_cross_entropy(const Tensor& local_logits, const Tensor& target, dist::ProcessGroup& group);

}  // namespace tessera::nn::tp
