#pragma once
// Multi-head scaled dot-product attention (batch-first) over the fused
// scaled_dot_product_attention op, masks included.
#include "tessera/nn/layers.h"

namespace tessera::nn {

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t embed_dim, int64_t num_heads, bool bias = true, Placement p = {});
  /**
   * query [B, Lq, E], key/value [B, Lk, E] -> [B, Lq, E]. `causal` masks key j for query i when
   * j > i + Lk - Lq (bottom-right aligned, scaled_dot_product_attention). The masks follow
   * torch.nn.MultiheadAttention: `key_padding_mask` [B, Lk], bool (true = a padded key, ignored)
   * or floating (added); `attn_mask` [Lq, Lk] or [B * num_heads, Lq, Lk], bool (true = not
   * allowed to attend) or floating (added to the scores). Both run the fused kernels, which read a
   * key-padding mask per tile (never Lq x Lk). A query left with no key gives zeros (PyTorch
   * 1.13 gave NaN).
   */
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, bool causal = false,
                 const Tensor& key_padding_mask = Tensor(), const Tensor& attn_mask = Tensor());
  /** Self-attention. */
  Tensor forward(const Tensor& x) override { return forward(x, x, x); }
  std::string name() const override { return "MultiHeadAttention"; }
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, out_proj;

 private:
  int64_t embed_dim_, heads_;
};

}  // namespace tessera::nn
