#pragma once
// The attention kernels' view of their optional additive mask: the input after the fixed ones
// (Attention: q, k, v; AttentionBackward: dO, q, k, v, O, lse), a [B, H, Tq, Tk] tensor in the
// compute dtype whose broadcast dims have stride 0 (scaled_dot_product_attention builds it).
#include <cstdint>
#include <limits>
#include <span>

#include "tessera/error.h"
#include "tessera/kernels/attention.h"
#include "tessera/tensor.h"

namespace tessera::backend_common {

inline kernels::AttentionBias attention_bias(std::span<const Tensor> inputs, size_t index) {
  if (inputs.size() <= index || !inputs[index].defined()) return {};
  const Tensor& b = inputs[index];
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  // The GPU kernels add 32-bit offsets within a tile (up to 128 rows and keys) to a tile's corner.
  TESSERA_CHECK(b.dim() == 4 && b.stride(2) >= 0 && b.stride(3) >= 0 && b.stride(2) <= kMax / 128 && b.stride(3) <= kMax / 128,
                "scaled_dot_product_attention", "the kernels take a mask [B, H, Tq, Tk] viewing a contiguous mask with rows under ",
                kMax / 128, " keys, got ", shape_str(b.shape()), " with strides ", b.stride(2), ", ", b.stride(3));
  return {b.data_ptr(), b.size(1), b.stride(0), b.stride(1), static_cast<int32_t>(b.stride(2)), static_cast<int32_t>(b.stride(3))};
}

}  // namespace tessera::backend_common
