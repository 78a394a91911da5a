#pragma once
// The dispatcher's side of the CPU cross-check (tessera/runtime.h, set_check_against_cpu).
#include <functional>
#include <span>

#include "tessera/backend/kernel.h"
#include "tessera/device.h"

namespace tessera::detail {

/** Whether a kernel on `device` is cross-checked now (on, not the CPU, not the check's own work). */
bool cross_check_wanted(Device device);
/** Copies the operands to the host, runs `launch` (the device kernel), replays the op on the CPU
 *  backend and records a divergence. */
void run_cross_checked(OpId op, Device device, std::span<const Tensor> inputs, std::span<Tensor> outputs, const OpAttrs& attrs,
                       const std::function<void()>& launch);

}  // namespace tessera::detail
