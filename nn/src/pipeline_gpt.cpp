// A GPT as pipeline stages: the embeddings with the first blocks, blocks, and the last blocks
// with the final norm and the head (a copy of the token embedding, tied through Pipeline::tie).
#include "tessera/nn/pipeline.h"

namespace tessera::nn {
namespace {

std::shared_ptr<GPTBlock> copy_block(const GPTBlock& b, const GPTConfig& c, Placement p) {
  auto copy = std::make_shared<GPTBlock>(c, p);
  copy->load_state_dict(b.state_dict());
  return copy;
}

// Stage 0: tokens [B, T] -> the first blocks' output [B, T, C].
class GPTEmbedStage : public Module {
 public:
  GPTEmbedStage(const GPT& gpt, int64_t first, int64_t count, Placement p) {
    tok = register_module("tok", std::make_shared<Embedding>(gpt.config().vocab, gpt.config().dim, p));
    pos = register_module("pos", std::make_shared<Embedding>(gpt.config().context, gpt.config().dim, p));
    tok->load_state_dict(gpt.tok->state_dict());
    pos->load_state_dict(gpt.pos->state_dict());
    for (int64_t l = first; l < first + count; ++l) {
      blocks.push_back(register_module("blocks." + std::to_string(l), copy_block(*gpt.blocks[l], gpt.config(), p)));
    }
  }
  Tensor forward(const Tensor& tokens) override {
    TESSERA_CHECK(tokens.dim() == 2 && !is_floating(tokens.dtype()), "GPT stage 0", "expected integer tokens [B, T], got ",
                  shape_str(tokens.shape()), " ", tokens.dtype());
    const Tensor positions = arange(0.0, static_cast<double>(tokens.size(1)), 1.0, DType::i64, tokens.device());
    Tensor x = add(tok->forward(tokens), pos->forward(positions));
    for (auto& b : blocks) x = b->forward(x);
    return x;
  }
  std::shared_ptr<Embedding> tok, pos;
  std::vector<std::shared_ptr<GPTBlock>> blocks;
};

// Middle and last stages: blocks, then (last) the final norm and the head.
class GPTBlocksStage : public Module {
 public:
  GPTBlocksStage(const GPT& gpt, int64_t first, int64_t count, bool last, Placement p) {
    for (int64_t l = first; l < first + count; ++l) {
      blocks.push_back(register_module("blocks." + std::to_string(l), copy_block(*gpt.blocks[l], gpt.config(), p)));
    }
    if (!last) return;
    ln_f = register_module("ln_f", std::make_shared<LayerNorm>(Shape{gpt.config().dim}, 1e-5, true, p));
    ln_f->load_state_dict(gpt.ln_f->state_dict());
    head = gpt.tok->weight.detach().to(p.device, p.dtype).clone();
    register_parameter("head", &head);
  }
  Tensor forward(const Tensor& x_in) override {
    Tensor x = x_in;
    for (auto& b : blocks) x = b->forward(x);
    return ln_f ? linear(ln_f->forward(x), head) : x;
  }
  std::vector<std::shared_ptr<GPTBlock>> blocks;
  std::shared_ptr<LayerNorm> ln_f;
  Tensor head;
};

}  // namespace

GPTStages split_gpt(const GPT& gpt, int64_t stages) {
  const auto layers = static_cast<int64_t>(gpt.blocks.size());
  TESSERA_CHECK(stages >= 2 && stages <= layers, "split_gpt", "a GPT of ", layers, " blocks splits into 2..", layers, " stages, not ",
                stages);
  const Placement p{gpt.tok->weight.dtype(), gpt.tok->weight.device()};
  GPTStages out;
  int64_t first = 0;
  for (int64_t s = 0; s < stages; ++s) {
    const int64_t count = layers / stages + (s < layers % stages ? 1 : 0);
    if (s == 0) {
      out.stages.push_back(std::make_shared<GPTEmbedStage>(gpt, first, count, p));
    } else {
      out.stages.push_back(std::make_shared<GPTBlocksStage>(gpt, first, count, s == stages - 1, p));
    }
    first += count;
  }
  return out;
}

}  // namespace tessera::nn
