// The tensor-core gate (backends/gpu/mma_gate.h): the device's capability and the code object's.
#include <doctest/doctest.h>

#include "gpu/mma_gate.h"

using namespace tessera::gpu::gate;

TEST_CASE("the MMA path needs both a device with matrix units and code compiled for them") {
  CHECK(cuda_mma_usable(90, 90));   // sm_90 SASS on an H100
  CHECK(cuda_mma_usable(90, 80));   // sm_80 code on an H100 (binary compatible)
  CHECK(cuda_mma_usable(80, 80));
  CHECK_FALSE(cuda_mma_usable(90, 75));  // compute_75 PTX JIT-compiled on an H100: mma() would __trap()
  CHECK_FALSE(cuda_mma_usable(75, 75));  // Turing: no m16n8k16 bf16
  CHECK_FALSE(cuda_mma_usable(75, 80));
  CHECK_FALSE(cuda_mma_usable(90, 0));   // no attributes (query failed): never guess
  CHECK(hip_mfma_usable("gfx90a:sramecc+:xnack-", 64));
  CHECK(hip_mfma_usable("gfx942", 64));
  CHECK_FALSE(hip_mfma_usable("gfx1030", 32));  // RDNA: no MFMA
  CHECK_FALSE(hip_mfma_usable("gfx90a", 32));
  CHECK_FALSE(hip_mfma_usable("gfx908", 64));   // CDNA1: another MFMA set, not built for
}
