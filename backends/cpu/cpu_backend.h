#pragma once
// The oneTBB CPU backend: host memory, synchronous execution, kernels parallel over cores.
#include <functional>

#include "../common/dtype_dispatch.h"
#include "isa.h"
#include "tessera/backend/backend.h"
#include "tessera/tensor.h"

namespace tessera::cpu {

/** Elements below which kernels stay on the calling thread (TBB's overhead dominates). */
inline constexpr int64_t kParallelGrain = 32768;

/**
 * Runs fn(begin, end) over [0, n) in chunks of at least `grain`, on the TBB pool when there
 * is more than one chunk. Chunk boundaries never affect results in Tessera's kernels.
 */
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

/** Runs K<T>{}(call) for the floating dtype T of the call's first output. */
template <template <class> class K> void float_dispatch(const KernelCall& c) {
  backend_common::dispatch_float(c.outputs[0].dtype(), op_name(c.op).data(), [&]<class T>() { K<T>{}(c); });
}

}  // namespace tessera::cpu

// Kernel registration, one function per family (each in its own translation unit), in the
// kernel set's namespace (isa.h).
TESSERA_CPU_KERNELS_BEGIN
void register_attention(KernelTable& table);
void register_elementwise(KernelTable& table);
void register_copy_fill(KernelTable& table);
void register_reductions(KernelTable& table);
void register_softmax(KernelTable& table);
void register_linalg(KernelTable& table);
void register_indexing(KernelTable& table);
void register_random(KernelTable& table);
void register_conv(KernelTable& table);
void register_pool(KernelTable& table);
void register_norm(KernelTable& table);
void register_cross_entropy(KernelTable& table);
void register_optim(KernelTable& table);

/** The SIMD path this kernel set was compiled for ("avx512", "avx2+fma" or "generic"). */
const char* simd_path();
/** Registers every kernel of this set (register.cpp picks the set). */
void register_kernels(KernelTable& table);
TESSERA_CPU_KERNELS_END
