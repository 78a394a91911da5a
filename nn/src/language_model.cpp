// GPT and CharLSTM, their parameter groups, and sampling with or without the decode state.
#include "tessera/nn/language_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tessera::nn {

std::vector<ParamGroup> LanguageModel::param_groups(const OptimOptions& options) const { return weight_decay_groups(*this, options); }

std::vector<ParamGroup> weight_decay_groups(const Module& module, const OptimOptions& options) {
  ParamGroup decay{{}, options}, no_decay{{}, options};
  no_decay.options.weight_decay = 0;
  for (const auto& [name, t] : module.named_parameters()) (t.dim() >= 2 ? decay : no_decay).params.push_back(t);
  std::vector<ParamGroup> groups;
  if (!decay.params.empty()) groups.push_back(std::move(decay));
  if (!no_decay.params.empty()) groups.push_back(std::move(no_decay));
  return groups;
}

namespace {
// GPT-2 initialisation: N(0, 0.02) weights, zero biases; the projections into the residual
// stream scaled by 1 / sqrt(2 layers) so its variance does not grow with depth.
void init_linear(Linear& l, double std) {
  NoGradGuard no_grad;
  l.weight.copy_(randn(l.weight.shape(), l.weight.dtype(), l.weight.device(), nullptr, 0.0, std));
  if (l.bias.defined()) l.bias.zero_();
}
}  // namespace

GPTBlock::GPTBlock(const GPTConfig& c, Placement p) : heads_(c.heads), dropout_(c.dropout) {
  ln1 = register_module("ln1", std::make_shared<LayerNorm>(Shape{c.dim}, 1e-5, true, p));
  qkv = register_module("qkv", std::make_shared<Linear>(c.dim, 3 * c.dim, true, p));
  proj = register_module("proj", std::make_shared<Linear>(c.dim, c.dim, true, p));
  ln2 = register_module("ln2", std::make_shared<LayerNorm>(Shape{c.dim}, 1e-5, true, p));
  fc = register_module("fc", std::make_shared<Linear>(c.dim, 4 * c.dim, true, p));
  fc_out = register_module("fc_out", std::make_shared<Linear>(4 * c.dim, c.dim, true, p));
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
  init_linear(*qkv, 0.02);
  init_linear(*fc, 0.02);
  init_linear(*proj, residual_std);
  init_linear(*fc_out, residual_std);
}

Tensor GPTBlock::forward(const Tensor& x, Tensor* k_cache, Tensor* v_cache) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / heads_;
  const double p = is_training() ? dropout_ : 0.0;
  const Tensor h = qkv->forward(ln1->forward(x));  // [B, T, 3C]
  auto heads = [&](int64_t i) { return h.narrow(2, i * c, c).reshape({b, t, heads_, d}).permute({0, 2, 1, 3}); };
  Tensor q = heads(0), k = heads(1), v = heads(2);
  if (k_cache) {  // decoding: this call's keys and values follow the cached ones
    if (k_cache->defined()) {
      k = cat({*k_cache, k}, 2);
      v = cat({*v_cache, v}, 2);
    }
    *k_cache = k.contiguous();
    *v_cache = v.contiguous();
  }
  // Causal with the mask at the bottom-right: new queries see the whole cache and each other causally.
  const Tensor att = scaled_dot_product_attention(q, k, v, true, p).permute({0, 2, 1, 3}).reshape({b, t, c});
  Tensor y = dropout_add(proj->forward(att), x, p, is_training());
  const Tensor m = fc_out->forward(linear(ln2->forward(y), fc->weight, fc->bias, Activation::gelu));
  return dropout_add(m, y, p, is_training());
}

GPT::GPT(const GPTConfig& c, Placement p) : GPT(c, p, std::vector<GPTBlockRange>{GPTBlockRange{0, c.layers}}) {}

GPTBlockRange gpt_stage_blocks(int64_t layers, int64_t stages, int64_t stage) {
  TESSERA_CHECK(stages >= 1 && stages <= layers && stage >= 0 && stage < stages, "GPT", "stage ", stage, " of ", stages, " over ", layers,
                " blocks (each stage needs a block)");
  GPTBlockRange r;
  for (int64_t s = 0; s <= stage; ++s) {
    r.first += r.count;
    r.count = layers / stages + (s < layers % stages ? 1 : 0);
  }
  return r;
}

GPT::GPT(const GPTConfig& c, Placement p, const std::vector<GPTBlockRange>& built) : config_(c) {
  TESSERA_CHECK(c.vocab > 0 && c.context > 0 && c.layers > 0 && c.heads > 0 && c.dim > 0 && c.dim % c.heads == 0, "GPT",
                "need positive sizes and dim divisible by heads, got vocab ", c.vocab, ", context ", c.context, ", layers ",
                c.layers, ", heads ", c.heads, ", dim ", c.dim);
  TESSERA_CHECK(c.dropout >= 0 && c.dropout < 1, "GPT", "dropout must be in [0, 1), got ", c.dropout);
  tok = register_module("tok", std::make_shared<Embedding>(c.vocab, c.dim, p));
  pos = register_module("pos", std::make_shared<Embedding>(c.context, c.dim, p));
  {
    NoGradGuard no_grad;
    tok->weight.copy_(randn(tok->weight.shape(), p.dtype, p.device, nullptr, 0.0, 0.02));
    pos->weight.copy_(randn(pos->weight.shape(), p.dtype, p.device, nullptr, 0.0, 0.02));
  }
  TESSERA_CHECK(!built.empty(), "GPT", "a part built with no blocks");
  for (const GPTBlockRange& r : built) {
    TESSERA_CHECK(r.first >= 0 && r.count >= 1 && r.first + r.count <= c.layers, "GPT", "blocks ", r.first, "..", r.first + r.count - 1,
                  " of a GPT of ", c.layers, " blocks");
  }
  for (int64_t l = 0; l < c.layers; ++l) {
    if (std::any_of(built.begin(), built.end(), [l](const GPTBlockRange& r) { return l >= r.first && l < r.first + r.count; })) {
      blocks.push_back(register_module("block" + std::to_string(l), std::make_shared<GPTBlock>(c, p)));
    } else {
      // A block of width 1 on the host makes the same draws as a full one (one per tensor, whatever
      // its size): the generator moves on exactly as the whole GPT's does.
      GPTBlock skipped(GPTConfig{c.vocab, c.context, c.layers, 1, 1, c.dropout}, Placement{DType::f32, kCPU});
      blocks.push_back(nullptr);
    }
  }
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(Shape{c.dim}, 1e-5, true, p));
}

bool GPT::is_whole() const {
  return std::all_of(blocks.begin(), blocks.end(), [](const auto& b) { return b != nullptr; });
}

int64_t GPT::whole_num_parameters() const {
  int64_t n = num_parameters(), per_block = 0;
  for (const auto& b : blocks) per_block = b ? b->num_parameters() : per_block;
  for (const auto& b : blocks) n += b ? 0 : per_block;
  return n;
}

Tensor GPT::forward_incremental(const Tensor& tokens, DecodeState& state) { return run(tokens, &state); }

Tensor GPT::run(const Tensor& tokens, DecodeState* state) {
  TESSERA_CHECK(tokens.dim() == 2 && !is_floating(tokens.dtype()), "GPT", "expected integer tokens [B, T], got ",
                shape_str(tokens.shape()), " ", tokens.dtype());
  const int64_t start = state ? state->length : 0, t = tokens.size(1);
  TESSERA_CHECK(start + t <= config_.context && t > 0, "GPT", "positions ", start, "..", start + t - 1, " exceed the context of ",
                config_.context);
  TESSERA_CHECK(is_whole(), "GPT", "this GPT is a part built for a pipeline stage (some blocks were skipped): it does not run forward");
  const Tensor positions = arange(static_cast<double>(start), static_cast<double>(start + t), 1.0, DType::i64, tokens.device());
  Tensor x = dropout(add(tok->forward(tokens), pos->forward(positions)), config_.dropout, is_training());
  if (state && state->tensors.size() != 2 * blocks.size()) state->tensors.assign(2 * blocks.size(), Tensor());
  for (size_t l = 0; l < blocks.size(); ++l) {
    // Through call(): the block's forward hooks run (fully sharded training gathers its weights).
    x = blocks[l]->call(
        [&] { return state ? blocks[l]->forward(x, &state->tensors[2 * l], &state->tensors[2 * l + 1]) : blocks[l]->forward(x); });
  }
  if (state) state->length += t;
  return linear(ln_f->forward(x), tok->weight);  // the head shares the token embedding
}

CharLSTM::CharLSTM(const CharLSTMConfig& c, Placement p) : config_(c) {
  TESSERA_CHECK(c.vocab > 0 && c.dim > 0 && c.layers > 0, "CharLSTM", "need positive sizes, got vocab ", c.vocab, ", dim ", c.dim,
                ", layers ", c.layers);
  embed = register_module("embed", std::make_shared<Embedding>(c.vocab, c.dim, p));
  RecurrentOptions o;
  o.num_layers = c.layers;
  o.batch_first = true;
  lstm = register_module("lstm", std::make_shared<LSTM>(c.dim, c.dim, o, p));
  head = register_module("head", std::make_shared<Linear>(c.dim, c.vocab, true, p));
}

Tensor CharLSTM::forward(const Tensor& tokens) {
  DecodeState s;
  return forward_incremental(tokens, s);
}

Tensor CharLSTM::forward_incremental(const Tensor& tokens, DecodeState& state) {
  TESSERA_CHECK(tokens.dim() == 2 && !is_floating(tokens.dtype()), "CharLSTM", "expected integer tokens [B, T], got ",
                shape_str(tokens.shape()), " ", tokens.dtype());
  std::pair<Tensor, Tensor> hc;
  if (state.tensors.size() == 2) hc = {state.tensors[0], state.tensors[1]};
  auto [out, next] = lstm->forward(embed->forward(tokens), hc);
  state.tensors = {next.first, next.second};
  state.length += tokens.size(1);
  return head->forward(out);
}

namespace {
int64_t sample_token(const Tensor& logits_row, const SampleOptions& o, Generator& gen) {
  std::vector<double> z = logits_row.to(DType::f64).to(kCPU).to_vector<double>();
  const int64_t v = static_cast<int64_t>(z.size());
  if (o.temperature <= 0) return std::max_element(z.begin(), z.end()) - z.begin();
  std::vector<int64_t> order(static_cast<size_t>(v));
  std::iota(order.begin(), order.end(), 0);
  const int64_t keep = o.top_k > 0 && o.top_k < v ? o.top_k : v;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int64_t a, int64_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  const double top = z[order[0]];
  std::vector<double> w(static_cast<size_t>(keep));
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += w[i] = std::exp((z[order[i]] - top) / o.temperature);
  double u = rand({1}, DType::f64, kCPU, &gen).item<double>() * total;
  for (int64_t i = 0; i < keep; ++i) {
    if ((u -= w[i]) < 0) return order[i];
  }
  return order[keep - 1];
}
}  // namespace

std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt, const SampleOptions& o) {
  TESSERA_CHECK(!prompt.empty(), "generate", "the prompt is empty");
  TESSERA_CHECK(o.tokens >= 0 && std::isfinite(o.temperature) && o.temperature >= 0 && o.top_k >= 0, "generate",
                "need tokens >= 0, a finite temperature >= 0 and top_k >= 0");
  for (int64_t t : prompt) TESSERA_CHECK(t >= 0 && t < model.vocab_size(), "generate", "token ", t, " is outside the vocabulary of ", model.vocab_size());
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const Device device = model.parameters().front().device();
  Generator gen(o.seed);
  std::vector<int64_t> seq = prompt;
  const int64_t ctx = model.context();
  size_t start = 0;  // first token of the window the model sees
  bool fresh = true;  // the decode state must be rebuilt from the window
  DecodeState state;
  auto upload = [&](size_t from) {
    const std::vector<int64_t> part(seq.begin() + static_cast<std::ptrdiff_t>(from), seq.end());
    return from_vector(part, {1, static_cast<int64_t>(part.size())}, device);
  };
  for (int64_t n = 0; n < o.tokens; ++n) {
    if (ctx > 0 && static_cast<int64_t>(seq.size() - start) > ctx) {
      start = seq.size() - static_cast<size_t>(std::max<int64_t>(1, ctx / 2));
      fresh = true;
    }
    Tensor logits;
    if (!o.use_cache) {
      logits = model.forward(upload(start));
    } else if (fresh) {
      state = DecodeState{};
      logits = model.forward_incremental(upload(start), state);
      fresh = false;
    } else {
      logits = model.forward_incremental(upload(seq.size() - 1), state);
    }
    seq.push_back(sample_token(logits.select(0, 0).select(0, logits.size(1) - 1), o, gen));
  }
  model.train(was_training);
  return seq;
}

}  // namespace tessera::nn
