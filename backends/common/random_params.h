#pragma once
// The two numbers kernels::random_draw takes, from a random op's named parameters
// (OpAttrs::random): the one place that knows which pair a kind of draw reads.
#include <array>

#include "tessera/backend/kernel.h"
#include "tessera/kernels/random_draw.h"

namespace tessera::backend_common {

template <kernels::RandomKind K>
std::array<double, 2> random_draw_params(const RandomAttrs& r) {
  if constexpr (K == kernels::RandomKind::normal) return {r.mean, r.stddev};
  else if constexpr (K == kernels::RandomKind::bernoulli) return {r.p, 0.0};
  else return {r.low, r.high};  // uniform and integer: [low, high)
}

}  // namespace tessera::backend_common
