// The libtorch peer of the GPT train step: the same model as nn::GPT (token + position
// embeddings, pre-LayerNorm blocks with causal self-attention and a GELU MLP, final LayerNorm,
// weight-tied head) and the same AdamW step with clipping, written the way PyTorch 1.13 users
// write it (it has no fused attention: matmul, masked_fill, softmax, matmul).
#include <torch/torch.h>

#include <cmath>
#include <memory>

#include "peers.h"

extern "C" void openblas_set_num_threads(int);

namespace tessera::bench::peers {
namespace {

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t dim, int64_t heads) : heads(heads) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    qkv = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
    proj = register_module("proj", torch::nn::Linear(dim, dim));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    fc = register_module("fc", torch::nn::Linear(dim, 4 * dim));
    fc_out = register_module("fc_out", torch::nn::Linear(4 * dim, dim));
  }
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& mask) {
    const int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / heads;
    auto h = qkv->forward(ln1->forward(x)).split(c, 2);
    auto split = [&](const torch::Tensor& y) { return y.view({b, t, heads, d}).transpose(1, 2); };
    auto q = split(h[0]), k = split(h[1]), v = split(h[2]);
    auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
    att = torch::softmax(att.masked_fill(mask.slice(0, 0, t).slice(1, 0, t), -INFINITY), -1);
    auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({b, t, c});
    x = x + proj->forward(y);
    return x + fc_out->forward(torch::gelu(fc->forward(ln2->forward(x))));
  }
  int64_t heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, fc_out{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  GptImpl(int64_t vocab, int64_t context, int64_t layers, int64_t heads, int64_t dim) {
    tok = register_module("tok", torch::nn::Embedding(vocab, dim));
    pos = register_module("pos", torch::nn::Embedding(context, dim));
    for (int64_t l = 0; l < layers; ++l) blocks.push_back(register_module("block" + std::to_string(l), Block(dim, heads)));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    mask = torch::ones({context, context}, torch::kBool).triu(1);
  }
  torch::Tensor forward(const torch::Tensor& idx) {
    const int64_t t = idx.size(1);
    auto x = tok->forward(idx) + pos->forward(torch::arange(t, torch::kLong));
    for (auto& blk : blocks) x = blk->forward(x, mask);
    return torch::matmul(ln_f->forward(x), tok->weight.t());
  }
  torch::nn::Embedding tok{nullptr}, pos{nullptr};
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
  torch::Tensor mask;
};
TORCH_MODULE(Gpt);

struct GptStep {
  Gpt model{nullptr};
  std::unique_ptr<torch::optim::AdamW> opt;
  torch::Tensor x, y;
};
}  // namespace

std::optional<Peer> torch_gpt_step(int64_t vocab, int64_t context, int64_t layers, int64_t heads, int64_t dim, int64_t batch, int threads) {
  torch::manual_seed(0);
  auto s = std::make_shared<GptStep>();
  s->model = Gpt(vocab, context, layers, heads, dim);
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : s->model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-3).betas({0.9, 0.99}).weight_decay(0.1)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-3).betas({0.9, 0.99}).weight_decay(0.0)));
  s->opt = std::make_unique<torch::optim::AdamW>(std::move(groups));
  s->x = torch::randint(0, vocab, {batch, context}, torch::kLong);
  s->y = torch::randint(0, vocab, {batch, context}, torch::kLong);
  return Peer{"libtorch", [s, threads, vocab] {
                openblas_set_num_threads(1);
                static int current = -1;
                if (current != threads) torch::set_num_threads(threads), current = threads;
                s->opt->zero_grad();
                auto logits = s->model->forward(s->x);
                auto loss = torch::nn::functional::cross_entropy(logits.view({-1, vocab}), s->y.view({-1}));
                loss.backward();
                torch::nn::utils::clip_grad_norm_(s->model->parameters(), 1.0);
                s->opt->step();
              }};
}

}  // namespace tessera::bench::peers
