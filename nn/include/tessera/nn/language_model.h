#pragma once
// Character-level language models: a GPT (pre-LayerNorm transformer over the fused attention
// op, weight-tied head) and an LSTM, behind one interface that trains on [B, T] token windows
// and decodes incrementally from a state (the GPT's per-layer key/value cache, the LSTM's
// hidden and cell states), so generation never recomputes the prefix.
#include <memory>
#include <string>
#include <vector>

#include "tessera/nn/layers.h"
#include "tessera/nn/optim.h"
#include "tessera/nn/recurrent.h"

namespace tessera::nn {

/** What an incremental decode carries between calls. */
struct DecodeState {
  int64_t length = 0;            ///< tokens consumed so far
  std::vector<Tensor> tensors;   ///< GPT: k0, v0, k1, v1, ... [B, H, length, D]; LSTM: h, c
};

class LanguageModel : public Module {
 public:
  virtual int64_t vocab_size() const = 0;
  /** The longest window the model takes at once (GPT: its position table); 0 = unbounded. */
  virtual int64_t context() const = 0;
  /** Logits [B, T, V] of tokens [B, T] (int64) from an empty state: forward(tokens). */
  /** Logits [B, T, V] of tokens [B, T] that follow the state's tokens; updates the state. */
  virtual Tensor forward_incremental(const Tensor& tokens, DecodeState& state) = 0;
  /**
   * AdamW parameter groups: matrices (linear and embedding weights) decay, vectors (biases,
   * LayerNorm gains) do not, as in GPT-2 / nanoGPT.
   */
  std::vector<ParamGroup> param_groups(const OptimOptions& options) const;
};

/** LanguageModel::param_groups' rule for any module (a pipeline stage, a tensor-parallel part):
 *  its matrices decay, its vectors do not. */
std::vector<ParamGroup> weight_decay_groups(const Module& module, const OptimOptions& options);

struct GPTConfig {
  int64_t vocab = 0, context = 128, layers = 4, heads = 4, dim = 128;
  double dropout = 0.0;  ///< residual, MLP and attention dropout while training
};

class GPTBlock : public Module {
 public:
  GPTBlock(const GPTConfig& c, Placement p);
  /** x [B, T, C]; with a cache the block appends this call's keys and values to (k, v). */
  Tensor forward(const Tensor& x, Tensor* k_cache, Tensor* v_cache);
  Tensor forward(const Tensor& x) override { return forward(x, nullptr, nullptr); }
  std::string name() const override { return "GPTBlock"; }
  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<Linear> qkv, proj, fc, fc_out;

 private:
  int64_t heads_;
  double dropout_;
};

/** Blocks [first, first + count) of a GPT: the part one pipeline stage holds. */
struct GPTBlockRange {
  int64_t first = 0, count = 0;
};
/** Stage `stage` of `stages` over `layers` blocks: the blocks spread evenly, the first stages
 *  taking one more where they do not divide (split_gpt's layout). */
GPTBlockRange gpt_stage_blocks(int64_t layers, int64_t stages, int64_t stage);

class GPT : public LanguageModel {
 public:
  GPT(const GPTConfig& c, Placement p = {});
  /**
   * Part of the GPT for one pipeline stage's rank: the embeddings, the final norm and only the
   * blocks in `built` (at least one; the others stay null and unregistered). Each skipped block's random draws
   * are skipped too (the generator moves on as if it had been built), so every weight built is
   * the whole GPT's of the same seed, and the generator ends where the whole GPT's leaves it.
   * GPTModelParallel takes it in place of the whole GPT for a pipeline of ranks: no rank's host
   * then holds the whole model. It does not run forward.
   */
  GPT(const GPTConfig& c, Placement p, GPTBlockRange built) : GPT(c, p, std::vector<GPTBlockRange>{built}) {}
  /** The same for the several model chunks an interleaved pipeline stage holds. */
  GPT(const GPTConfig& c, Placement p, const std::vector<GPTBlockRange>& built);
  /** False for a part built with a GPTBlockRange short of every block. */
  bool is_whole() const;
  /** The whole GPT's parameter count (a part counts the blocks it skipped too). */
  int64_t whole_num_parameters() const;
  Tensor forward(const Tensor& tokens) override { return run(tokens, nullptr); }
  Tensor forward_incremental(const Tensor& tokens, DecodeState& state) override;
  int64_t vocab_size() const override { return config_.vocab; }
  int64_t context() const override { return config_.context; }
  std::string name() const override { return "GPT"; }
  const GPTConfig& config() const { return config_; }
  std::shared_ptr<Embedding> tok, pos;
  std::vector<std::shared_ptr<GPTBlock>> blocks;
  std::shared_ptr<LayerNorm> ln_f;

 private:
  Tensor run(const Tensor& tokens, DecodeState* state);
  GPTConfig config_;
};

struct CharLSTMConfig {
  int64_t vocab = 0, dim = 256, layers = 2;
};

/** Embedding -> multi-layer LSTM -> linear head. */
class CharLSTM : public LanguageModel {
 public:
  CharLSTM(const CharLSTMConfig& c, Placement p = {});
  Tensor forward(const Tensor& tokens) override;
  Tensor forward_incremental(const Tensor& tokens, DecodeState& state) override;
  int64_t vocab_size() const override { return config_.vocab; }
  int64_t context() const override { return 0; }
  std::string name() const override { return "CharLSTM"; }
  std::shared_ptr<Embedding> embed;
  std::shared_ptr<LSTM> lstm;
  std::shared_ptr<Linear> head;

 private:
  CharLSTMConfig config_;
};

struct SampleOptions {
  int64_t tokens = 200;
  double temperature = 1.0;  ///< 0 = greedy
  int64_t top_k = 0;         ///< 0 = all
  uint64_t seed = 0;
  bool use_cache = true;     ///< false: re-run the whole window for every token (the reference)
};

/**
 * Appends `options.tokens` sampled tokens to `prompt` (batch 1). Beyond the model's context
 * the window slides by half a context (both with and without the cache, so the two agree).
 */
std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt, const SampleOptions& options);

}  // namespace tessera::nn
