// A GPT as pipeline stages: the embeddings with the first blocks, blocks, and the last blocks
// with the final norm and the head (a copy of the token embedding, tied through Pipeline::tie).
// With a tensor-parallel group each stage's layers are also split across it (pipeline x tensor
// parallelism): the embedding and head by vocabulary, the blocks by heads and MLP features.
#include "tessera/nn/pipeline.h"

#include <algorithm>

#include "tessera/nn/tensor_parallel.h"

namespace tessera::nn {
namespace {

// Block `l` of `gpt` for this stage: a copy, or its tensor-parallel split.
ModulePtr stage_block(const GPT& gpt, int64_t l, const std::shared_ptr<dist::ProcessGroup>& tp, Placement p) {
  TESSERA_CHECK(gpt.blocks[l] != nullptr, "split_gpt", "block ", l, " of the GPT was not built (a part built for another stage)");
  if (tp) return std::make_shared<tp::ParallelGPTBlock>(*gpt.blocks[l], gpt.config().heads, tp);
  auto copy = std::make_shared<GPTBlock>(gpt.config(), p);
  copy->load_state_dict(gpt.blocks[l]->state_dict());
  return copy;
}

// Stage 0: tokens [B, T] -> the first blocks' output [B, T, C].
class GPTEmbedStage : public Module {
 public:
  GPTEmbedStage(const GPT& gpt, int64_t first, int64_t count, const std::shared_ptr<dist::ProcessGroup>& tp, Placement p) {
    const GPTConfig& c = gpt.config();
    if (tp) {
      auto split = std::make_shared<tp::VocabParallelEmbedding>(c.vocab, c.dim, tp, p);
      split->from_full(gpt.tok->weight);
      tok = register_module("tok", ModulePtr(split));
    } else {
      auto whole = std::make_shared<Embedding>(c.vocab, c.dim, p);
      whole->load_state_dict(gpt.tok->state_dict());
      tok = register_module("tok", ModulePtr(whole));
    }
    pos = register_module("pos", std::make_shared<Embedding>(c.context, c.dim, p));
    pos->load_state_dict(gpt.pos->state_dict());
    for (int64_t l = first; l < first + count; ++l)
      blocks.push_back(register_module("blocks." + std::to_string(l), stage_block(gpt, l, tp, p)));
  }
  Tensor forward(const Tensor& tokens) override {
    TESSERA_CHECK(tokens.dim() == 2 && !is_floating(tokens.dtype()), "GPT stage 0", "expected integer tokens [B, T], got ",
                  shape_str(tokens.shape()), " ", tokens.dtype());
    const Tensor positions = arange(0.0, static_cast<double>(tokens.size(1)), 1.0, DType::i64, tokens.device());
    Tensor x = add(tok->forward(tokens), pos->forward(positions));
    for (auto& b : blocks) x = (*b)(x);
    return x;
  }
  ModulePtr tok;
  std::shared_ptr<Embedding> pos;
  std::vector<ModulePtr> blocks;
};

// Middle and last stages: blocks, then (last) the final norm and the head.
class GPTBlocksStage : public Module {
 public:
  GPTBlocksStage(const GPT& gpt, int64_t first, int64_t count, bool last, std::shared_ptr<dist::ProcessGroup> tp, Placement p)
      : tp_(std::move(tp)) {
    for (int64_t l = first; l < first + count; ++l)
      blocks.push_back(register_module("blocks." + std::to_string(l), stage_block(gpt, l, tp_, p)));
    if (!last) return;
    ln_f = register_module("ln_f", std::make_shared<LayerNorm>(Shape{gpt.config().dim}, 1e-5, true, p));
    ln_f->load_state_dict(gpt.ln_f->state_dict());
    Tensor whole = gpt.tok->weight.detach();
    if (tp_) {  // this rank's vocabulary rows, as its stage-0 peer's VocabParallelEmbedding holds them
      const int64_t local = whole.size(0) / tp_->world_size();
      whole = whole.narrow(0, tp_->rank() * local, local);
    }
    head = whole.to(p.device, p.dtype).clone();
    register_parameter("head", &head);
  }
  Tensor forward(const Tensor& x_in) override {
    Tensor x = x_in;
    for (auto& b : blocks) x = (*b)(x);
    if (!ln_f) return x;
    const Tensor h = ln_f->forward(x);
    return linear(tp_ ? tp::copy_to_region(h, *tp_) : h, head);  // split: the input's gradient all-reduced (f)
  }
  std::vector<ModulePtr> blocks;
  std::shared_ptr<LayerNorm> ln_f;
  Tensor head;

 private:
  std::shared_ptr<dist::ProcessGroup> tp_;
};

}  // namespace

GPTStages split_gpt(const GPT& gpt, int64_t stages, std::shared_ptr<dist::ProcessGroup> tensor_parallel,
                    const std::vector<int64_t>& only_stages) {
  const auto layers = static_cast<int64_t>(gpt.blocks.size());
  TESSERA_CHECK(stages >= 2 && stages <= layers, "split_gpt", "a GPT of ", layers, " blocks splits into 2..", layers, " stages, not ",
                stages);
  for (int64_t s : only_stages) TESSERA_CHECK(s >= 0 && s < stages, "split_gpt", "stage ", s, " of ", stages);
  const Placement p{gpt.tok->weight.dtype(), gpt.tok->weight.device()};
  GPTStages out;
  for (int64_t s = 0; s < stages; ++s) {
    const GPTBlockRange r = gpt_stage_blocks(layers, stages, s);
    if (!only_stages.empty() && std::find(only_stages.begin(), only_stages.end(), s) == only_stages.end()) {
      out.stages.push_back(nullptr);
    } else if (s == 0) {
      out.stages.push_back(std::make_shared<GPTEmbedStage>(gpt, r.first, r.count, tensor_parallel, p));
    } else {
      out.stages.push_back(std::make_shared<GPTBlocksStage>(gpt, r.first, r.count, s == stages - 1, tensor_parallel, p));
    }
  }
  return out;
}

}  // namespace tessera::nn
