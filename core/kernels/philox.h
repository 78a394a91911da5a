#pragma once
// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC'11).
// Counter-based: every output is a pure function of (key, counter), so any backend and any
// thread partition produce the same numbers for the same (seed, offset, element index).
#include <cstdint>

#include "macros.h"

namespace tessera::kernels {

struct Philox4 {
  uint32_t v[4];
};

TESSERA_HD_INLINE Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr.v[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

/**
 * The four 32-bit words for block `block` (= element index / 4) of a draw made at generator
 * offset `offset` with seed `seed`. Element i of a tensor uses word i % 4 of block i / 4.
 */
TESSERA_HD_INLINE Philox4 philox_block(uint64_t seed, uint64_t offset, uint64_t block) {
  Philox4 ctr{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), static_cast<uint32_t>(offset),
               static_cast<uint32_t>(offset >> 32)}};
  return philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

/** Uniform float in [0, 1) from the top 24 bits of a word (exactly representable). Converted
 *  as a signed int (the same value): AVX2 has no unsigned int -> float conversion. */
TESSERA_HD_INLINE float uniform_from_bits(uint32_t w) {
  return static_cast<float>(static_cast<int32_t>(w >> 8)) * (1.0f / 16777216.0f);
}
/** Uniform double in [0, 1) from 53 bits of two words. */
TESSERA_HD_INLINE double uniform_double_from_bits(uint32_t hi, uint32_t lo) {
  const uint64_t x = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(x & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace tessera::kernels
