// MultiHeadAttention, LSTM and GRU.
#include <cmath>
#include <functional>

#include "tessera/nn/attention.h"
#include "tessera/nn/init.h"
#include "tessera/nn/recurrent.h"

namespace tessera::nn {

MultiHeadAttention::MultiHeadAttention(int64_t embed_dim, int64_t num_heads, bool bias, Placement p)
    : embed_dim_(embed_dim), heads_(num_heads) {
  TESSERA_CHECK(num_heads > 0 && embed_dim % num_heads == 0, "MultiHeadAttention", "embed_dim ", embed_dim,
                " must be divisible by num_heads ", num_heads);
  q_proj = register_module("q_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias, p));
  k_proj = register_module("k_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias, p));
  v_proj = register_module("v_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias, p));
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias, p));
}

namespace {
// PyTorch's MultiheadAttention masks (true = masked out, or floating = added) as one mask in
// scaled_dot_product_attention's convention (true = attend, or added), broadcastable to
// [B, H, Lq, Lk]: a key-padding mask alone stays [B, 1, 1, Lk], never Lq x Lk.
Tensor sdpa_mask(const Tensor& key_padding_mask, const Tensor& attn_mask, int64_t b, int64_t heads, int64_t lq, int64_t lk) {
  Tensor kpm, am;
  if (key_padding_mask.defined()) {
    TESSERA_CHECK(
        key_padding_mask.shape() == Shape({b, lk}) && (key_padding_mask.dtype() == DType::boolean || is_floating(key_padding_mask.dtype())),
        "MultiHeadAttention", "key_padding_mask must be bool [", b, ", ", lk, "] (true = padded) or floating (added), got ",
        shape_str(key_padding_mask.shape()), " ", key_padding_mask.dtype());
    kpm = key_padding_mask.reshape({b, 1, 1, lk});
    if (kpm.dtype() == DType::boolean) kpm = logical_not(kpm);
  }
  if (attn_mask.defined()) {
    const bool flat = attn_mask.shape() == Shape({lq, lk}), per_head = attn_mask.shape() == Shape({b * heads, lq, lk});
    TESSERA_CHECK((flat || per_head) && (attn_mask.dtype() == DType::boolean || is_floating(attn_mask.dtype())), "MultiHeadAttention",
                  "attn_mask must be [", lq, ", ", lk, "] or [", b * heads, ", ", lq, ", ", lk,
                  "], bool (true = not allowed) or floating (added), got ", shape_str(attn_mask.shape()), " ", attn_mask.dtype());
    am = per_head ? attn_mask.reshape({b, heads, lq, lk}) : attn_mask;
    if (am.dtype() == DType::boolean) am = logical_not(am);
  }
  if (!kpm.defined() || !am.defined()) return kpm.defined() ? kpm : am;
  if (kpm.dtype() == DType::boolean && am.dtype() == DType::boolean) return logical_and(kpm, am);
  const auto additive = [](const Tensor& m, DType dt) {
    return m.dtype() == DType::boolean ? where(m, 0.0, full({}, -INFINITY, dt, m.device())) : m;
  };
  const DType dt = is_floating(kpm.dtype()) ? kpm.dtype() : am.dtype();
  return add(additive(kpm, dt), additive(am, dt));
}
}  // namespace

Tensor MultiHeadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value, bool causal, const Tensor& key_padding_mask,
                                   const Tensor& attn_mask) {
  TESSERA_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3 && query.size(2) == embed_dim_ &&
                    key.shape() == value.shape() && key.size(0) == query.size(0),
                "MultiHeadAttention", "expected query [B, Lq, ", embed_dim_, "] and key/value [B, Lk, ", embed_dim_,
                "], got ", shape_str(query.shape()), ", ", shape_str(key.shape()), ", ", shape_str(value.shape()));
  const int64_t b = query.size(0), lq = query.size(1), lk = key.size(1), d = embed_dim_ / heads_;
  const Tensor mask = sdpa_mask(key_padding_mask, attn_mask, b, heads_, lq, lk);
  auto split_heads = [&](const Tensor& t, int64_t len) { return t.reshape({b, len, heads_, d}).permute({0, 2, 1, 3}); };
  const Tensor q = split_heads(q_proj->forward(query), lq);
  const Tensor k = split_heads(k_proj->forward(key), lk);
  const Tensor v = split_heads(v_proj->forward(value), lk);
  const Tensor ctx = scaled_dot_product_attention(q, k, v, mask, 0.0, causal).permute({0, 2, 1, 3}).reshape({b, lq, embed_dim_});
  return out_proj->forward(ctx);
}

namespace {
// Registers layer-l weights of a recurrent module with `gates` gates.
void make_weights(int64_t input, int64_t hidden, int64_t gates, const RecurrentOptions& o, Placement p,
                  std::vector<Tensor>& w_ih, std::vector<Tensor>& w_hh, std::vector<Tensor>& b_ih, std::vector<Tensor>& b_hh) {
  TESSERA_CHECK(input > 0 && hidden > 0 && o.num_layers > 0, "recurrent", "sizes and num_layers must be positive");
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
  for (int64_t l = 0; l < o.num_layers; ++l) {
    const int64_t in = l == 0 ? input : hidden;
    w_ih.push_back(rand({gates * hidden, in}, p.dtype, p.device, nullptr, -bound, bound));
    w_hh.push_back(rand({gates * hidden, hidden}, p.dtype, p.device, nullptr, -bound, bound));
    b_ih.push_back(o.bias ? rand({gates * hidden}, p.dtype, p.device, nullptr, -bound, bound) : Tensor());
    b_hh.push_back(o.bias ? rand({gates * hidden}, p.dtype, p.device, nullptr, -bound, bound) : Tensor());
  }
}

// Names the per-layer weights like PyTorch (weight_ih_l0, ...).
void register_layers(std::vector<Tensor>& w_ih, std::vector<Tensor>& w_hh, std::vector<Tensor>& b_ih,
                     std::vector<Tensor>& b_hh, const std::function<void(std::string, Tensor*)>& reg) {
  for (size_t l = 0; l < w_ih.size(); ++l) {
    const std::string s = std::to_string(l);
    reg("weight_ih_l" + s, &w_ih[l]);
    reg("weight_hh_l" + s, &w_hh[l]);
    reg("bias_ih_l" + s, &b_ih[l]);
    reg("bias_hh_l" + s, &b_hh[l]);
  }
}

RecurrentLayer layer_of(int64_t l, const std::vector<Tensor>& w_ih, const std::vector<Tensor>& w_hh, const std::vector<Tensor>& b_ih,
                        const std::vector<Tensor>& b_hh) {
  TESSERA_CHECK(l >= 0 && l < static_cast<int64_t>(w_ih.size()), "recurrent layer", "layer ", l, " of ", w_ih.size());
  const auto i = static_cast<size_t>(l);
  return {w_ih[i], w_hh[i], b_ih[i], b_hh[i]};
}

Tensor time_major(const Tensor& x, bool batch_first, const char* op) {
  TESSERA_CHECK(x.dim() == 3, op, "expected a 3-D input, got ", shape_str(x.shape()));
  return batch_first ? x.transpose(0, 1) : x;
}
}  // namespace

LSTM::LSTM(int64_t input_size, int64_t hidden_size, RecurrentOptions options, Placement p) : hidden_(hidden_size), options_(options) {
  make_weights(input_size, hidden_size, 4, options, p, w_ih_, w_hh_, b_ih_, b_hh_);
  register_layers(w_ih_, w_hh_, b_ih_, b_hh_, [this](std::string n, Tensor* t) { register_parameter(std::move(n), t); });
}

RecurrentLayer LSTM::layer(int64_t l) const { return layer_of(l, w_ih_, w_hh_, b_ih_, b_hh_); }

std::pair<Tensor, std::pair<Tensor, Tensor>> LSTM::forward(const Tensor& x_in, const std::pair<Tensor, Tensor>& state) {
  Tensor x = time_major(x_in, options_.batch_first, "LSTM");
  const int64_t steps = x.size(0), batch = x.size(1), h = hidden_;
  std::vector<Tensor> h_n, c_n;
  for (int64_t l = 0; l < options_.num_layers; ++l) {
    Tensor ht = state.first.defined() ? state.first.select(0, l) : zeros({batch, h}, x.dtype(), x.device());
    Tensor ct = state.second.defined() ? state.second.select(0, l) : zeros({batch, h}, x.dtype(), x.device());
    // The input projection of all time steps at once; the recurrence one step at a time.
    const Tensor xw = linear(x, w_ih_[l], b_ih_[l]);
    std::vector<Tensor> outs;
    for (int64_t t = 0; t < steps; ++t) {
      const Tensor g = add(xw.select(0, t), linear(ht, w_hh_[l], b_hh_[l]));
      const auto parts = chunk(g, 4, 1);
      const Tensor i = sigmoid(parts[0]), f = sigmoid(parts[1]), gg = tanh(parts[2]), o = sigmoid(parts[3]);
      ct = add(mul(f, ct), mul(i, gg));
      ht = mul(o, tanh(ct));
      outs.push_back(ht);
    }
    x = stack(outs, 0);
    h_n.push_back(ht);
    c_n.push_back(ct);
  }
  return {options_.batch_first ? x.transpose(0, 1) : x, {stack(h_n, 0), stack(c_n, 0)}};
}

GRU::GRU(int64_t input_size, int64_t hidden_size, RecurrentOptions options, Placement p) : hidden_(hidden_size), options_(options) {
  make_weights(input_size, hidden_size, 3, options, p, w_ih_, w_hh_, b_ih_, b_hh_);
  register_layers(w_ih_, w_hh_, b_ih_, b_hh_, [this](std::string n, Tensor* t) { register_parameter(std::move(n), t); });
}

RecurrentLayer GRU::layer(int64_t l) const { return layer_of(l, w_ih_, w_hh_, b_ih_, b_hh_); }

std::pair<Tensor, Tensor> GRU::forward(const Tensor& x_in, const Tensor& h0) {
  Tensor x = time_major(x_in, options_.batch_first, "GRU");
  const int64_t steps = x.size(0), batch = x.size(1);
  std::vector<Tensor> h_n;
  for (int64_t l = 0; l < options_.num_layers; ++l) {
    Tensor ht = h0.defined() ? h0.select(0, l) : zeros({batch, hidden_}, x.dtype(), x.device());
    const Tensor xw = linear(x, w_ih_[l], b_ih_[l]);
    std::vector<Tensor> outs;
    for (int64_t t = 0; t < steps; ++t) {
      const auto xi = chunk(xw.select(0, t), 3, 1);
      const auto hh = chunk(linear(ht, w_hh_[l], b_hh_[l]), 3, 1);
      const Tensor r = sigmoid(add(xi[0], hh[0])), z = sigmoid(add(xi[1], hh[1]));
      const Tensor n = tanh(add(xi[2], mul(r, hh[2])));
      ht = add(mul(sub(1.0, z), n), mul(z, ht));  // (1 - z) * n + z * h
      outs.push_back(ht);
    }
    x = stack(outs, 0);
    h_n.push_back(ht);
  }
  return {options_.batch_first ? x.transpose(0, 1) : x, stack(h_n, 0)};
}

}  // namespace tessera::nn
