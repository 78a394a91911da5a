#pragma once
// scatter_reduce's reductions: the enum the front-end (tessera/ops/indexing.h) takes and the
// kernels read from OpAttrs. sum and mean are built on scatter_add; prod, amax and amin are the
// scatter_reduce kernel's (MulFn, MaximumFn, MinimumFn of binary.h: NaN propagates like PyTorch).
#include <cstdint>

namespace tessera {
enum class ScatterReduce : uint8_t { sum, mean, prod, amax, amin };
}  // namespace tessera
