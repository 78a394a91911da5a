#pragma once
// Front-end helpers shared by the op families: argument checks and the kernel call.
#include <initializer_list>
#include <span>

#include "tessera/backend/kernel.h"
#include "tessera/kernels/activation.h"
#include "tessera/tensor.h"

namespace tessera::detail {

/** Throws "<op>: <what> is an undefined tensor". */
void check_defined(const Tensor& t, const char* op, const char* what = "input");
/** The device all `tensors` share; throws "<op>: expected all tensors on one device, got ..." */
Device common_device(std::initializer_list<const Tensor*> tensors, const char* op);
/** Looks the kernel up on the device's backend and runs it; throws NotImplemented if missing. */
void run_kernel(OpId op, Device device, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                const OpAttrs& attrs = {});
/** Throws "<op>: expected a floating dtype, got int64" unless x is floating. */
void check_floating(const Tensor& x, const char* op);
/** Throws "<op>: <what> must be int32 or int64, got ..." */
void check_index_dtype(const Tensor& index, const char* op, const char* what = "index");
/** `x` viewed with `shape` by expand (x must broadcast to it). */
Tensor expand_to(const Tensor& x, const Shape& shape);

/** g * act'(z) in one kernel (OpId::ActivationBackward), from `saved`: the output y = act(z) for
 *  relu/sigmoid/tanh, the pre-activation z for gelu/gelu_tanh/silu (kernels::grad_from_output).
 *  g is cast to saved's dtype; the result has saved's shape. With `bias` ([n], saved's last
 *  axis), the kernel reads saved + bias as z (bias_activation's backward). */
Tensor activation_backward(const Tensor& g, const Tensor& saved, Activation act, const Tensor& bias = Tensor());

}  // namespace tessera::detail
