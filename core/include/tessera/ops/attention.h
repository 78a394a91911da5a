#pragma once
// Scaled dot-product attention: one op with a fused, memory-linear kernel on every backend
// (FlashAttention-2 style online softmax; the backward recomputes the probabilities from the
// saved log-sum-exp), and the materialised composition kept as the reference.
#include <optional>

#include "tessera/random.h"
#include "tessera/tensor.h"

namespace tessera {

/**
 * softmax(q k^T * scale [+ causal mask]) (dropout) v.
 * q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] with the same leading (batch, head) dims,
 * dtype and device; returns [..., Tq, Dv]. `scale` defaults to 1 / sqrt(D). `causal` masks
 * key j for query i when j > i + (Tk - Tq): aligned to the bottom-right corner like
 * FlashAttention >= 2.1 (identical to PyTorch's is_causal when Tq == Tk; a query block
 * appended to a KV cache sees the whole cache). Queries that see no key give zeros.
 * `dropout_p` drops attention probabilities with a Philox mask from `gen` (the default
 * generator when null) and scales the rest by 1 / (1 - p); the mask equals
 * bernoulli([B.., Tq, Tk], 1 - p) drawn from the same generator state.
 * Memory is O(T) per head: only the per-row log-sum-exp is kept for backward. With fused
 * kernels off (set_fused_kernels(false)) this runs the reference composition.
 */
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = false,
                                    double dropout_p = 0.0, std::optional<double> scale = std::nullopt,
                                    Generator* gen = nullptr);

/**
 * With a mask, in torch.nn.functional.scaled_dot_product_attention's order and convention:
 * `attn_mask` broadcastable to [..., Tq, Tk] is bool (true = the query may attend to the key) or
 * floating (added to the scaled scores; -inf removes a key). An undefined mask is no mask. A
 * key-padding mask is a [B, 1, 1, Tk] mask: the fused kernels read any mask through its
 * broadcast strides, per tile, so it is never expanded to Tq x Tk (memory stays O(T) per head).
 * `is_causal` may be combined with a mask. Queries whose keys are all masked give zeros and zero
 * gradients (PyTorch >= 2.5 does the same; 1.13 gave NaN). The fused kernels give the mask no
 * gradient: a floating mask that requires one (a learned position bias) runs the reference
 * composition, which does.
 */
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask, double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = std::nullopt, Generator* gen = nullptr);

/** The same function composed from matmul, where, softmax and a Bernoulli mask: it stores the
 *  [.., Tq, Tk] probabilities. The reference the fused kernels are tested against. */
Tensor scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = false,
                                              double dropout_p = 0.0, std::optional<double> scale = std::nullopt,
                                              Generator* gen = nullptr);
Tensor scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                              double dropout_p = 0.0, bool is_causal = false, std::optional<double> scale = std::nullopt,
                                              Generator* gen = nullptr);

}  // namespace tessera
