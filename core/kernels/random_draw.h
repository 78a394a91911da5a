#pragma once
// One element of a random tensor from its Philox block, shared by the device backends (GPU
// kernels, Kokkos): element i uses word i % 4 of block i / 4, giving the CPU backend's numbers
// (normal samples agree to the accuracy of the platform's logf/sinf/cosf).
#include <cmath>
#include <cstdint>

#include "convert.h"
#include "half.h"
#include "philox.h"

namespace tessera::kernels {

enum class RandomKind { uniform, normal, integer, bernoulli };

/** uniform: [a, b); normal: mean a, std b; integer: [a, b); bernoulli: p = a. */
template <class T, RandomKind K> TESSERA_HD_INLINE T random_draw(uint64_t seed, uint64_t offset, int64_t i, double a, double b) {
  const Philox4 w = philox_block(seed, offset, static_cast<uint64_t>(i / 4));
  const int j = static_cast<int>(i % 4);
  if constexpr (K == RandomKind::uniform) {
    using C = compute_t<T>;
    C v = static_cast<C>(a) + static_cast<C>(b - a) * static_cast<C>(uniform_from_bits(w.v[j]));
    if (v >= static_cast<C>(b) && b > a) v = static_cast<C>(a);
    return static_cast<T>(v);
  } else if constexpr (K == RandomKind::normal) {
    const int pair = j & ~1;
    const float u1 = 1.0f - uniform_from_bits(w.v[pair]);
    const float u2 = uniform_from_bits(w.v[pair + 1]);
    const float r = sqrtf(-2.0f * logf(u1));
    const float angle = 6.283185307179586f * u2;
    const float z = (j & 1) ? r * sinf(angle) : r * cosf(angle);
    return static_cast<T>(static_cast<float>(a) + static_cast<float>(b) * z);
  } else if constexpr (K == RandomKind::integer) {
    const uint64_t bits = (static_cast<uint64_t>(w.v[j]) << 32) | w.v[(j + 1) & 3];
    const auto lo = static_cast<int64_t>(a);
    const auto range = static_cast<uint64_t>(static_cast<int64_t>(b) - lo);
    return convert<T, int64_t>(lo + static_cast<int64_t>(bits % range));
  } else {
    return convert<T, int>(uniform_from_bits(w.v[j]) < static_cast<float>(a) ? 1 : 0);
  }
}

/**
 * Fused dropout (+ residual) over the 4 elements of Philox block `blk` (elements 4 blk ..
 * 4 blk + 3 below n; one Philox evaluation per 4 elements, as in the Bernoulli kernels): keeps
 * x with probability keep_prob (the draw of a Bernoulli tensor with the same seed and offset,
 * so fused and unfused masks agree), scales kept values by `scale`, adds the residual when
 * given. Backward regenerates the same mask.
 */
/** One element of dropout: x * scale when its Philox word keeps it (probability keep_prob; the
 *  rule of a Bernoulli tensor), else 0. Shared by dropout_add_block and the CPU's batched loop. */
template <class C> TESSERA_HD_INLINE C dropout_kept(uint32_t word, float keep_prob, C x, C scale) {
  return uniform_from_bits(word) < keep_prob ? x * scale : C(0);
}

template <class T> TESSERA_HD_INLINE void dropout_add_block(uint64_t seed, uint64_t offset, int64_t blk, int64_t n, float keep_prob,
                                                           double scale, const T* x, const T* residual, T* out) {
  using C = compute_t<T>;
  const Philox4 w = philox_block(seed, offset, static_cast<uint64_t>(blk));
  for (int j = 0; j < 4; ++j) {
    const int64_t i = 4 * blk + j;
    if (i >= n) break;
    const C kept = dropout_kept(w.v[j], keep_prob, static_cast<C>(x[i]), static_cast<C>(scale));
    out[i] = static_cast<T>(residual ? static_cast<C>(residual[i]) + kept : kept);
  }
}

}  // namespace tessera::kernels
