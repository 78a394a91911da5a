#pragma once
// Pieces of fused attention every backend shares: which keys a query sees, and the dropout
// factor of one attention probability. Kept here so the CPU, GPU and Kokkos kernels (and their
// backward passes, which regenerate the mask) agree bit for bit on both.
#include <cmath>
#include <cstdint>

#include "philox.h"

namespace tessera::kernels {

/**
 * Causal visibility with the mask aligned to the bottom-right corner (FlashAttention >= 2.1):
 * query i of tq sees key j of tk when j <= i + (tk - tq). With tq == tk this is j <= i; a
 * single new query over a cache of tk keys sees all of them, which is what decoding with a KV
 * cache needs. Queries with no visible key (tq > tk) give zero output and zero gradient.
 */
TESSERA_HD_INLINE bool attention_visible(int64_t i, int64_t j, int64_t tq, int64_t tk, bool causal) {
  return !causal || j <= i + (tk - tq);
}

/** One past the last key query i sees (tk when not causal; may be <= 0). */
TESSERA_HD_INLINE int64_t attention_key_end(int64_t i, int64_t tq, int64_t tk, bool causal) {
  if (!causal) return tk;
  const int64_t e = i + (tk - tq) + 1;
  return e < tk ? e : tk;
}

/**
 * Dropout on the probability of (row, key) where row = bh * tq + i: 1 / keep_prob when its
 * Philox word keeps it, else 0. Element index row * tk + j uses word index % 4 of block
 * index / 4 (the numbering of a Bernoulli tensor [BH, Tq, Tk] with the same seed and offset).
 */
TESSERA_HD_INLINE float attention_dropout_factor(uint64_t seed, uint64_t offset, int64_t row, int64_t j, int64_t tk,
                                                 float keep_prob) {
  const int64_t e = row * tk + j;
  const Philox4 w = philox_block(seed, offset, static_cast<uint64_t>(e / 4));
  return uniform_from_bits(w.v[e % 4]) < keep_prob ? 1.0f / keep_prob : 0.0f;
}

/**
 * An additive mask on the scaled scores, read per element through the strides of its
 * [B, H, Tq, Tk] view (0 on broadcast dims), so a key-padding mask [B, 1, 1, Tk] costs its Tk
 * values per sequence and is never expanded to Tq x Tk. Batch-head bh is b * heads + h. The
 * values are in the kernel's compute dtype (f32; f64 for f64 inputs); -inf removes a key. The
 * mask under the view is contiguous, so its row and key strides are Tk or 0 and 1 or 0: 32 bits
 * (GPU kernels keep them in registers across their tile loops). Kernels take plane(bh) once per
 * tile and index it by i * s_q + j * s_k.
 */
struct AttentionBias {
  const void* ptr = nullptr;
  int64_t heads = 1, s_batch = 0, s_head = 0;
  int32_t s_q = 0, s_k = 0;
  TESSERA_HD_INLINE bool defined() const { return ptr != nullptr; }
  template <class C>
  TESSERA_HD_INLINE const C* plane(int64_t bh) const {
    return static_cast<const C*>(ptr) + (bh / heads) * s_batch + (bh % heads) * s_head;
  }
  template <class C>
  TESSERA_HD_INLINE const C* row(int64_t bh, int64_t i) const {
    return plane<C>(bh) + i * s_q;
  }
  template <class C>
  TESSERA_HD_INLINE C at(int64_t bh, int64_t i, int64_t j) const {
    return row<C>(bh, i)[j * s_k];
  }
};

/**
 * The max an online softmax subtracts: a row whose scores so far are all -inf (masked) keeps
 * 0, so its probabilities are exp(-inf) = 0 rather than exp(-inf - -inf) = NaN.
 */
template <class C>
TESSERA_HD_INLINE C attention_softmax_base(C m) {
  return m == -static_cast<C>(INFINITY) ? C(0) : m;
}

}  // namespace tessera::kernels
