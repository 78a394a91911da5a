// The kernel set's registration: one KernelTable per ISA set (compiled with the kernels, once per
// set, so simd_path reports the flags the kernels got). register.cpp picks the set from cpuid.
#include "cpu_backend.h"

TESSERA_CPU_KERNELS_BEGIN

// Defined here, in a kernel translation unit, so it reports the flags the kernels got.
const char* simd_path() {
#if defined(TESSERA_CPU_AVX512)
  return "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
  return "avx2+fma";
#else
  return "generic";
#endif
}

void register_kernels(KernelTable& table) {
  register_elementwise(table);
  register_copy_fill(table);
  register_reductions(table);
  register_softmax(table);
  register_linalg(table);
  register_indexing(table);
  register_random(table);
  register_conv(table);
  register_pool(table);
  register_norm(table);
  register_cross_entropy(table);
  register_optim(table);
  register_attention(table);
}

TESSERA_CPU_KERNELS_END
