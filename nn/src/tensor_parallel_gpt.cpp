// The tensor-parallel GPT: a whole GPTBlock's weights split by heads (QKV, proj) and by MLP
// features (fc, fc_out) across the group, layer norms replicated; the model around the blocks
// with its token embedding (and tied output layer) split by vocabulary.
#include "tessera/nn/tensor_parallel.h"

namespace tessera::nn::tp {
namespace {

std::shared_ptr<LayerNorm> replica(const LayerNorm& whole) {
  auto ln = std::make_shared<LayerNorm>(whole.normalized_shape(), whole.eps(), whole.weight.defined(),
                                        Placement{whole.weight.dtype(), whole.weight.device()});
  ln->load_state_dict(whole.state_dict());
  return ln;
}

}  // namespace

ParallelGPTBlock::ParallelGPTBlock(const GPTBlock& whole, int64_t heads, std::shared_ptr<dist::ProcessGroup> group)
    : group_(std::move(group)) {
  TESSERA_CHECK(group_ != nullptr, "ParallelGPTBlock", "needs a process group");
  const int64_t w = group_->world_size(), r = group_->rank();
  const int64_t c = whole.proj->weight.size(0), hidden = whole.fc->weight.size(0);
  TESSERA_CHECK(heads > 0 && c % heads == 0 && heads % w == 0, "ParallelGPTBlock", heads, " heads of width ", c, " do not divide across ",
                w, " ranks");
  local_heads_ = heads / w;
  const Placement p{whole.proj->weight.dtype(), whole.proj->weight.device()};
  ln1 = register_module("ln1", replica(*whole.ln1));
  ln2 = register_module("ln2", replica(*whole.ln2));
  qkv = register_module("qkv", std::make_shared<ColumnParallelLinear>(c, 3 * c, group_, true, false, p));
  proj = register_module("proj", std::make_shared<RowParallelLinear>(c, c, group_, true, p));
  fc = register_module("fc", std::make_shared<ColumnParallelLinear>(c, hidden, group_, true, false, p));
  fc_out = register_module("fc_out", std::make_shared<RowParallelLinear>(hidden, c, group_, true, p));
  // QKV's rows are [q; k; v], each heads x head width: this rank takes its heads' rows of each.
  const int64_t local = c / w;
  {
    const NoGradGuard no_grad;
    const Tensor& wq = whole.qkv->weight;
    const Tensor& bq = whole.qkv->bias;
    qkv->weight.copy_(cat({wq.narrow(0, r * local, local), wq.narrow(0, c + r * local, local), wq.narrow(0, 2 * c + r * local, local)}, 0));
    qkv->bias.copy_(cat({bq.narrow(0, r * local, local), bq.narrow(0, c + r * local, local), bq.narrow(0, 2 * c + r * local, local)}, 0));
  }
  proj->from_full(whole.proj->weight, whole.proj->bias);
  fc->from_full(whole.fc->weight, whole.fc->bias);
  fc_out->from_full(whole.fc_out->weight, whole.fc_out->bias);
}

Tensor ParallelGPTBlock::forward(const Tensor& x) {
  TESSERA_CHECK(x.dim() == 3, "ParallelGPTBlock", "input ", shape_str(x.shape()), " is not [B, T, C]");
  const int64_t b = x.size(0), t = x.size(1), local = qkv->weight.size(0) / 3, d = local / local_heads_;
  const Tensor h = qkv->forward(ln1->forward(x));  // [B, T, 3 C/w]: this rank's heads of q, k, v
  auto heads = [&](int64_t i) { return h.narrow(2, i * local, local).reshape({b, t, local_heads_, d}).permute({0, 2, 1, 3}); };
  const Tensor att = scaled_dot_product_attention(heads(0), heads(1), heads(2), true).permute({0, 2, 1, 3}).reshape({b, t, local});
  const Tensor y = add(proj->forward(att), x);
  return add(fc_out->forward(gelu(fc->forward(ln2->forward(y)))), y);
}

ParallelGPT::ParallelGPT(const GPT& whole, std::shared_ptr<dist::ProcessGroup> group) : group_(std::move(group)) {
  TESSERA_CHECK(group_ != nullptr, "ParallelGPT", "needs a process group");
  const GPTConfig& c = whole.config();
  TESSERA_CHECK(c.dropout == 0, "ParallelGPT", "dropout ", c.dropout,
                " is not supported (replicated activations would need one RNG stream per region)");
  const Placement p{whole.tok->weight.dtype(), whole.tok->weight.device()};
  tok = register_module("tok", std::make_shared<VocabParallelEmbedding>(c.vocab, c.dim, group_, p));
  tok->from_full(whole.tok->weight);
  pos = register_module("pos", std::make_shared<Embedding>(c.context, c.dim, p));
  pos->load_state_dict(whole.pos->state_dict());
  for (size_t l = 0; l < whole.blocks.size(); ++l) {
    blocks.push_back(register_module(std::to_string(l), std::make_shared<ParallelGPTBlock>(*whole.blocks[l], c.heads, group_)));
  }
  ln_f = register_module("ln_f", replica(*whole.ln_f));
}

Tensor ParallelGPT::forward(const Tensor& tokens) {
  TESSERA_CHECK(tokens.dim() == 2 && !is_floating(tokens.dtype()), "ParallelGPT", "expected integer tokens [B, T], got ",
                shape_str(tokens.shape()), " ", tokens.dtype());
  const int64_t t = tokens.size(1);
  TESSERA_CHECK(t <= pos->weight.size(0), "ParallelGPT", t, " positions exceed the context of ", pos->weight.size(0));
  const Tensor positions = arange(0.0, static_cast<double>(t), 1.0, DType::i64, tokens.device());
  Tensor x = add(tok->forward(tokens), pos->forward(positions));
  for (const auto& block : blocks) x = (*block)(x);
  // The output layer is the vocabulary-split embedding: this rank's slice of the logits; the
  // gradient of the replicated input is all-reduced (f).
  return linear(copy_to_region(ln_f->forward(x), *group_), tok->weight);
}

Tensor ParallelGPT::loss(const Tensor& tokens, const Tensor& targets) {
  const Tensor logits = forward(tokens);
  return vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(2)}), targets.reshape({-1}), *group_);
}

}  // namespace tessera::nn::tp
