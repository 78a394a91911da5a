#pragma once
// Pieces of fused attention every backend shares: which keys a query sees, and the dropout
// factor of one attention probability. Kept here so the CPU, GPU and Kokkos kernels (and their
// backward passes, which regenerate the mask) agree bit for bit on both.
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

}  // namespace tessera::kernels
