#pragma once
// Portability macros for the header-only, device-agnostic functors in core/kernels.
// These headers include nothing outside core/kernels (and the C/C++ standard library) so the
// same functor compiles for the host, CUDA (nvcc), HIP (hipcc) and Kokkos.

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>  // device-side memcpy and math before any kernel header uses them
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define TESSERA_HD __host__ __device__
#define TESSERA_DEVICE_CODE 1
#else
#define TESSERA_HD
#endif

#define TESSERA_HD_INLINE TESSERA_HD inline
