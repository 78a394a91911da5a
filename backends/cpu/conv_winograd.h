#pragma once
// Winograd F(2x2, 3x3) convolution for the CPU (f32): 3x3 kernels at stride 1 and dilation 1,
// one group. Each 2x2 block of outputs ("tile") is computed from a 4x4 input patch with 16
// multiplies per (input, output channel) pair instead of 36, as 16 independent GEMMs
// (O x C) @ (C x tiles) between the transformed weights and transformed patches.
//
// Used for the forward, the input gradient (a 3x3 stride-1 convolution of the output gradient
// with the flipped, transposed weights) and the weight gradient when both channel counts are at least
// kWinogradMinChannels: below that the transforms cost more than the multiplies they save (the
// CNN's first layer, 1 -> 32 channels, stays on im2col). Transforms use exact binary fractions
// (0, ±1, ±1/2), so the only extra rounding is in the sums of up to 4 x 4 terms: errors are
// within a few ulp of the direct sum's for the magnitudes a network sees.
#include <cstdint>

#include "isa.h"

TESSERA_CPU_KERNELS_BEGIN

inline constexpr int64_t kWinogradMinChannels = 8;

struct Winograd3x3 {
  const float* x = nullptr;  // input [n, c, h, w]
  int64_t n = 0, c = 0, h = 0, w = 0;
  // Weights [o, c, 3, 3]; with flip_transpose the stored tensor is [c, o, 3, 3] and used
  // rotated by 180 degrees (the input gradient's kernel).
  const float* weight = nullptr;
  bool flip_transpose = false;
  int64_t o = 0;
  int64_t ph = 0, pw = 0;        // zero padding, each 0..2
  const float* bias = nullptr;   // [o] or null
  float* out = nullptr;          // [n, o, ho, wo], ho = h + 2 ph - 2, wo = w + 2 pw - 2
  int64_t ho = 0, wo = 0;
  const float* grad_out = nullptr;  // weight gradient: dY [n, o, ho, wo]
  float* grad_weight = nullptr;     // weight gradient: dW [o, c, 3, 3]
};

/** out = conv(x, weight) + bias by F(2x2, 3x3), parallel over blocks of tiles. */
void winograd_conv3x3(const Winograd3x3& args);

/** grad_weight = the weight gradient of out = conv(x, w) given grad_out, by F(2x2, 3x3): the 16
 *  products summed over tiles as GEMMs, G^T dU G at the end. Deterministic for any thread count
 *  (fixed chunks of tiles, summed in order). weight, bias and out are not used. */
void winograd_conv3x3_weight_grad(const Winograd3x3& args);

TESSERA_CPU_KERNELS_END
