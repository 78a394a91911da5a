#pragma once
// Whether the tensor-core (matrix-unit) kernels may run: host-only decisions, unit-tested in
// tests/core/mma_gate_test.cpp. A device's capability is not enough. The code object that runs
// must have been compiled for the matrix units: a build that carries only compute_75 PTX is
// JIT-compiled on an H100 with __CUDA_ARCH__ == 750, its mma() is the __trap() branch, and
// choosing the MMA path by the device's compute capability alone kills the context.
#include <string_view>

namespace tessera::gpu::gate {

/** CUDA: the device (compute capability, 10*major+minor) runs mma.sync m16n8k16 and the kernel's
 *  code was compiled for sm_80+ (cudaFuncAttributes::ptxVersion of the loaded kernel: the
 *  virtual architecture its __CUDA_ARCH__ had, also for SASS built from compute_XY). */
inline bool cuda_mma_usable(int device_cc, int kernel_ptx_version) { return device_cc >= 80 && kernel_ptx_version >= 80; }

/** HIP: CDNA2/CDNA3 (gfx90a, gfx94x) with 64-wide wavefronts. A HIP code object is built per
 *  exact target, so one that loads was compiled for this architecture (and its MFMA). */
inline bool hip_mfma_usable(std::string_view gcn_arch, int warp_size) {
  const bool cdna = gcn_arch.rfind("gfx90a", 0) == 0 || gcn_arch.rfind("gfx94", 0) == 0;
  return cdna && warp_size == 64;
}

}  // namespace tessera::gpu::gate
