#pragma once
// Fused, in-place optimizer updates (one kernel per parameter instead of a chain of ops).
// All tensors must share shape, dtype (floating) and device; they are updated in place.
#include "tessera/backend/kernel.h"
#include "tessera/tensor.h"

#include <vector>

namespace tessera {

/** Adam/AdamW step on `param` with `grad`, updating the moment buffers in place. */
void adam_update_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const OptimizerAttrs& attrs);
/**
 * Adam/AdamW over many parameters in as few launches as possible (multi-tensor apply: up to 24
 * tensors per kernel). All tensors share dtype and device; each quadruple shares a shape.
 */
void adam_update_multi_(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& exp_avg,
                        std::vector<Tensor>& exp_avg_sq, const OptimizerAttrs& attrs);
/** SGD step; `momentum_buffer` is used (and may be undefined) only when attrs.momentum != 0. */
void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const OptimizerAttrs& attrs);

}  // namespace tessera
