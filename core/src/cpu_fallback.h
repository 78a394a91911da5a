#pragma once
// The dispatcher's side of the CPU fallback (tessera/runtime.h, set_cpu_fallback).
#include <span>

#include "tessera/backend/backend.h"

namespace tessera::detail {

/** Runs `op` on the CPU backend in place of `backend`'s missing kernel (or its kernel that
 *  refuses `dtype`) when the fallback is on, copying operands over and results back; false when
 *  it is off or the CPU does not support it either. */
bool run_cpu_fallback(OpId op, DType dtype, Backend& backend, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                      const OpAttrs& attrs);

}  // namespace tessera::detail
