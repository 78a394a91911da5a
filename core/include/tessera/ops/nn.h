#pragma once
// Neural-network kernels: convolution, pooling, normalisation, losses and dropout. All are
// differentiable (backward kernels or rules written with public ops).
#include <array>
#include <optional>
#include <vector>

#include "tessera/random.h"
#include "tessera/tensor.h"

namespace tessera {

using Size2 = std::array<int64_t, 2>;

/**
 * 2-D convolution (cross-correlation, like PyTorch). x: [N, C, H, W], weight:
 * [O, C / groups, kh, kw], bias: [O] or undefined. Output [N, O, Ho, Wo] with
 * Ho = (H + 2 ph - dh (kh - 1) - 1) / sh + 1. Throws "conv2d: ..." on shape mismatches.
 */
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Size2 stride = {1, 1},
              Size2 padding = {0, 0}, Size2 dilation = {1, 1}, int64_t groups = 1);
/** PyTorch's string paddings: "valid" (none) and "same" (output size = input size, stride 1
 *  only; an odd total padding puts the extra row/column at the bottom/right). */
enum class PaddingMode { valid, same };
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2 stride, PaddingMode padding,
              Size2 dilation = {1, 1}, int64_t groups = 1);
/** 1-D convolution: x [N, C, L], weight [O, C / groups, k] (conv2d over a height of 1). */
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1, int64_t groups = 1);
/** conv1d with "valid" or "same" padding. */
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, PaddingMode padding,
              int64_t dilation = 1, int64_t groups = 1);

/**
 * Transposed 2-D convolution (the gradient of conv2d with respect to its input, like
 * PyTorch's conv_transpose2d): x [N, C, H, W], weight [C, O / groups, kh, kw], bias [O].
 * Ho = (H - 1) sh - 2 ph + dh (kh - 1) + output_padding_h + 1; output_padding must be smaller
 * than the stride or the dilation.
 */
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Size2 stride = {1, 1},
                        Size2 padding = {0, 0}, Size2 output_padding = {0, 0}, int64_t groups = 1, Size2 dilation = {1, 1});
using Size3 = std::array<int64_t, 3>;
/** 3-D convolution: x [N, C, D, H, W], weight [O, C / groups, kd, kh, kw] (a sum over kd of conv2d on depth slices). */
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Size3 stride = {1, 1, 1},
              Size3 padding = {0, 0, 0}, Size3 dilation = {1, 1, 1}, int64_t groups = 1);

/** How pad() fills, as torch.nn.functional.pad: a value, the mirror image without the edge
 *  (reflect), the edge repeated (replicate), or the other end (circular). */
enum class PadMode { constant, reflect, replicate, circular };
/**
 * Pads the last pads.size() / 2 axes; pads = {last_lo, last_hi, previous_lo, previous_hi, ...}
 * (PyTorch's order). Negative pads crop. reflect needs pads < size, circular pads <= size.
 */
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode = PadMode::constant, double value = 0.0);

/** grid_sample's interpolation and what a position outside the input reads. */
enum class SampleMode { bilinear, nearest, bicubic };
enum class SamplePadding { zeros, border, reflection };
/**
 * torch.nn.functional.grid_sample (2-D): out[n, c, i, j] samples input[n, c] at grid[n, i, j] =
 * (x, y) in [-1, 1] (align_corners: -1 and 1 are the corner pixels' centres, otherwise their
 * outer edges). input [N, C, H, W], grid [N, Ho, Wo, 2] -> [N, C, Ho, Wo]; gradients for both.
 */
Tensor grid_sample(const Tensor& input, const Tensor& grid, SampleMode mode = SampleMode::bilinear,
                   SamplePadding padding = SamplePadding::zeros, bool align_corners = false);

/** Max pooling over [N, C, H, W]; stride defaults to the kernel size. Padding is -inf. */
Tensor max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = {0, 0},
                  Size2 dilation = {1, 1});
/** Max pooling that also returns the argmax (flat h * W + w within each plane, int64). */
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Size2 kernel, std::optional<Size2> stride = std::nullopt,
                                                  Size2 padding = {0, 0}, Size2 dilation = {1, 1});
/** Average pooling; count_include_pad counts padded zeros in the divisor (PyTorch default). */
Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = {0, 0},
                  bool count_include_pad = true);
/**
 * Pooling with PyTorch's ceil_mode: the output size rounds up, so a last partial window
 * covers the bottom/right edge (a window never starts in the right padding). For averages the
 * divisor counts only the part of the window inside the (padded) input.
 */
Tensor max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding, Size2 dilation, bool ceil_mode);
Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding, bool count_include_pad, bool ceil_mode);
/** Average pooling to a fixed output size (windows as in PyTorch). */
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);

/**
 * Batch normalisation over axis 1 of [N, C] or [N, C, ...]. In training mode the batch
 * statistics are used and, when given, running_mean/var are updated in place with
 * `momentum` (unbiased variance, like PyTorch); in eval mode the running statistics are used.
 */
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);
/** Layer normalisation over the last `normalized_dims` axes. */
Tensor layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);
/**
 * Group normalisation of x [N, C, ...]: the C channels in `groups` groups, each group's channels
 * and positions normalised together per sample (biased variance), then weight[c] x + bias[c]
 * (both optional, [C]). As PyTorch's group_norm; computed as layer_norm over
 * [N, groups, C / groups * spatial], so fused and differentiable wherever layer_norm is.
 */
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), double eps = 1e-5);
/** Instance normalisation of x [N, C, spatial...]: statistics per sample and channel (group_norm
 *  with one channel per group), then the optional per-channel affine. No running statistics. */
Tensor instance_norm(const Tensor& x, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), double eps = 1e-5);

enum class Reduction { none, mean, sum };

/**
 * Cross entropy from logits [N, C] (or [N, C, d...]) and integer targets [N] (or [N, d...]),
 * fused log_softmax + NLL, with label smoothing and an ignored target value. `mean` divides by
 * the number of non-ignored targets.
 */
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::mean,
                     double label_smoothing = 0.0, int64_t ignore_index = -100);
/**
 * Cross entropy with per-class `weight` [C] (undefined: none) and either integer targets (as
 * above; `mean` divides by the summed weights of the kept targets, as PyTorch) or float class
 * probabilities of the logits' shape (soft labels; `mean` divides by the number of items).
 * The plain overload takes probability targets too.
 */
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, Reduction reduction = Reduction::mean,
                     double label_smoothing = 0.0, int64_t ignore_index = -100);
/** Negative log likelihood from log-probabilities [N, C] and integer targets [N]. */
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::mean,
                int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
/** Binary cross entropy on logits, computed stably; `pos_weight` (optional) scales positives. */
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::mean,
                                        const Tensor& pos_weight = Tensor());

/** Zeroes elements with probability p (Philox mask) and scales the rest by 1 / (1 - p). */
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);
/**
 * residual + dropout(x, p) (a transformer block's "x + dropout(sublayer(x))"). With fused
 * kernels (fused_kernels()) it is one kernel and the mask is never stored: the backward
 * regenerates it from the same Philox draw. The mask equals bernoulli(1 - p) of the same
 * generator state, so the fused and unfused paths agree. `residual` may be undefined.
 */
Tensor dropout_add(const Tensor& x, const Tensor& residual, double p, bool training, Generator* gen = nullptr);

}  // namespace tessera
