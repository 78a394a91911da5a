#pragma once
// The dispatcher's side of the CPU fallback (tessera/runtime.h, set_cpu_fallback).
#include <span>

#include "tessera/backend/backend.h"

namespace tessera::detail {

/** Runs `op` on the CPU backend in place of `backend`'s missing kernel when the fallback is on
 *  (copying operands over and results back); false when it is off or the CPU lacks it too. */
bool run_cpu_fallback(OpId op, Backend& backend, std::span<const Tensor> inputs, std::span<Tensor> outputs, const OpAttrs& attrs);

}  // namespace tessera::detail
