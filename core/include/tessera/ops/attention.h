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

/** The same function composed from matmul, where, softmax and a Bernoulli mask: it stores the
 *  [.., Tq, Tk] probabilities. The reference the fused kernels are tested against. */
Tensor scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = false,
                                              double dropout_p = 0.0, std::optional<double> scale = std::nullopt,
                                              Generator* gen = nullptr);

}  // namespace tessera
