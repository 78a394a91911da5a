// The cuDNN path's geometry decision (backends/cuda/conv_geometry.h), checked without a GPU: an
// H200 answered BAD_PARAM to a transposed convolution whose output_padding reaches the stride.
#include <doctest/doctest.h>

#include "cuda/conv_geometry.h"

using tessera::cudnn::geometry_consistent;

TEST_CASE("cuDNN gets a convolution only when y is exactly the convolution of x") {
  // 3x3, padding 1, stride 1: same size.
  CHECK(geometry_consistent({2, 3, 8, 8}, {4, 3, 3, 3}, {2, 4, 8, 8}, {1, 1}, {1, 1}, {1, 1}));
  // Stride 2: floor((8 + 2 - 2 - 1) / 2) + 1 = 4.
  CHECK(geometry_consistent({2, 3, 8, 8}, {4, 3, 3, 3}, {2, 4, 4, 4}, {1, 1}, {2, 2}, {1, 1}));
  // A transposed convolution 4 -> 8 with output_padding 1 < stride 2 is the input gradient of a
  // convolution 8 -> 4: consistent.
  CHECK(geometry_consistent({1, 2, 8, 8}, {2, 2, 3, 3}, {1, 2, 4, 4}, {1, 1}, {2, 2}, {1, 1}));
  // output_padding 2 >= stride 2 (legal with dilation 3): the output has a row the convolution
  // never reaches, 4 -> 13 where the convolution of 13 gives 5, not 4.
  const int64_t out = (4 - 1) * 2 - 2 * 1 + 3 * (3 - 1) + 2 + 1;  // 13
  CHECK_FALSE(geometry_consistent({1, 2, out, out}, {2, 2, 3, 3}, {1, 2, 4, 4}, {1, 1}, {2, 2}, {3, 3}));
  CHECK(geometry_consistent({1, 2, out - 2, out - 2}, {2, 2, 3, 3}, {1, 2, 4, 4}, {1, 1}, {2, 2}, {3, 3}));
  // Degenerate geometry is never sent.
  CHECK_FALSE(geometry_consistent({1, 2, 2, 2}, {2, 2, 5, 5}, {1, 2, 1, 1}, {0, 0}, {1, 1}, {1, 1}));
  CHECK_FALSE(geometry_consistent({1, 2, 8}, {2, 2, 3}, {1, 2, 6}, {0, 0}, {1, 1}, {1, 1}));
}
