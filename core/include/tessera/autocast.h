#pragma once
// Automatic mixed precision: inside an AutocastGuard(bf16 or f16) scope, each op runs in the
// precision its category calls for (docs/mixed-precision.md has the table):
//   lower  matmul, linear, conv2d: f32 inputs are cast to the autocast dtype; the kernels
//          accumulate in f32 (tensor cores / AVX512_BF16 / f32 FMAs) and round once at the end
//   f32    softmax, log_softmax, layer_norm, batch_norm, every loss, sum/mean/prod/cumsum:
//          f16/bf16 inputs are cast up to f32
//   other  ops run in the promoted dtype of their inputs, as outside the scope
// f64 tensors are never cast. Casts are recorded by autograd, so gradients reach f32 master
// weights in f32. Backward passes need no scope: they follow the dtypes the forward recorded.
#include "tessera/tensor.h"

namespace tessera {

struct AutocastState {
  bool enabled = false;
  DType dtype = DType::bf16;  ///< f16 or bf16
};

/** The calling thread's autocast state (off by default). */
const AutocastState& autocast_state();

/** Enables autocast to `dtype` (f16 or bf16) for the calling thread for the guard's lifetime;
 *  `enabled = false` turns it off inside an enclosing scope. */
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype, bool enabled = true);
  /** Autocast off for the scope (inside an autocast region: a part that must run in f32). */
  static AutocastGuard disabled();
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  AutocastState saved_;
};

enum class CastPolicy { lower, f32 };

/** `x` as an op of `policy` consumes it under the current autocast state (x itself when autocast
 *  is off, x is undefined, not floating, f64, or already in the wanted dtype). */
Tensor autocast(const Tensor& x, CastPolicy policy);

}  // namespace tessera
