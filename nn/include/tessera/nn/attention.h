#pragma once
// Multi-head scaled dot-product attention (batch-first), composed from public ops so it
// differentiates and runs on every backend.
#include "tessera/nn/layers.h"

namespace tessera::nn {

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t embed_dim, int64_t num_heads, bool bias = true, Placement p = {});
  /**
   * query [B, Lq, E], key/value [B, Lk, E] -> [B, Lq, E]. `causal` masks keys after each query
   * position; `key_padding_mask` (bool [B, Lk], true = ignore) masks padded keys.
   */
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, bool causal = false,
                 const Tensor& key_padding_mask = Tensor());
  /** Self-attention. */
  Tensor forward(const Tensor& x) override { return forward(x, x, x); }
  std::string name() const override { return "MultiHeadAttention"; }
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, out_proj;

 private:
  int64_t embed_dim_, heads_;
};

}  // namespace tessera::nn
