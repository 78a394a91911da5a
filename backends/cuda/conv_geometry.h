#pragma once
// Host-only decisions of the cuDNN convolution path (cudnn.cpp), kept apart so that a unit test
// on a machine without a GPU can check them (tests/core/cudnn_geometry_test.cpp).
#include <array>
#include <cstdint>
#include <vector>

namespace tessera::cudnn {

/**
 * Whether cuDNN accepts the geometry x [N,C,H,W], w [O,C/g,kh,kw], y [N,O,Ho,Wo]: its descriptors
 * require y to be exactly the convolution of x, floor((H + 2p - d(k - 1) - 1) / s) + 1 per axis.
 * A transposed convolution runs as the input gradient of the convolution whose input is its
 * output, and with output_padding >= stride (legal while it is below the dilation) that output
 * has rows the convolution never reaches: cuDNN answers BAD_PARAM (seen on an H200), so such
 * calls take Tessera's own kernel.
 */
inline bool geometry_consistent(const std::vector<int64_t>& x, const std::vector<int64_t>& w, const std::vector<int64_t>& y,
                                const std::array<int64_t, 2>& pad, const std::array<int64_t, 2>& stride,
                                const std::array<int64_t, 2>& dilation) {
  if (x.size() != 4 || w.size() != 4 || y.size() != 4) return false;
  for (int a = 0; a < 2; ++a) {
    if (stride[a] <= 0 || dilation[a] <= 0) return false;
    const int64_t span = x[2 + a] + 2 * pad[a] - dilation[a] * (w[2 + a] - 1) - 1;
    if (span < 0 || span / stride[a] + 1 != y[2 + a]) return false;
  }
  return true;
}

}  // namespace tessera::cudnn
