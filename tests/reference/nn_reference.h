#pragma once
// Naive double-precision references for the nn kernels (loops straight from the definitions).
#include <array>

#include "reference/reference.h"

namespace tessera::ref {

using I2 = std::array<int64_t, 2>;

Ref conv2d(const Ref& x, const Ref& w, const Ref* bias, I2 stride, I2 padding, I2 dilation, int64_t groups);
Ref max_pool2d(const Ref& x, I2 kernel, I2 stride, I2 padding, I2 dilation);
Ref avg_pool2d(const Ref& x, I2 kernel, I2 stride, I2 padding, bool count_include_pad);
/** Normalises over axis 1 of [N, C, ...] with batch statistics. */
Ref batch_norm(const Ref& x, const Ref* gamma, const Ref* beta, double eps);
/** Normalises over the last `dims` axes. */
Ref layer_norm(const Ref& x, int64_t dims, const Ref* gamma, const Ref* beta, double eps);
/** Per-sample cross entropy of logits [N, C] with smoothing; ignored samples give 0. */
Ref cross_entropy(const Ref& logits, const std::vector<int64_t>& target, double smoothing, int64_t ignore);

}  // namespace tessera::ref
