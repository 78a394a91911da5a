#pragma once
// Registration of the GPU kernel families into a backend's kernel table. Each backend that
// builds this source tree (cuda, hip, emulated) calls these for its own target namespace.
#include "runtime.h"
#include "tessera/backend/backend.h"
#include "tessera/backend/kernel.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {
void register_elementwise(KernelTable& table);
void register_reductions(KernelTable& table);
void register_linalg(KernelTable& table);
void register_indexing(KernelTable& table);
void register_nn(KernelTable& table);
void register_optim(KernelTable& table);

/** Every family. */
inline void register_all(KernelTable& table) {
  register_elementwise(table);
  register_reductions(table);
  register_linalg(table);
  register_indexing(table);
  register_nn(table);
  register_optim(table);
}

/** The kernels of this tree whose results may vary between runs (deterministic mode's switches). */
inline std::vector<NondeterministicOp> nondeterministic_ops() {
  return {{OpId::ScatterAdd, "float atomic adds land in arrival order (also the gradients of index_select and embedding)",
           "one thread per line along the axis adds its sources in index order, no atomics (less parallel)"}};
}
}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
