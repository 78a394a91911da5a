#pragma once
// The GEMM-shaped ops through Kokkos Kernels (linalg_blas.cpp); each returns false, having run
// nothing, when the team-tiled GEMM of linalg.cpp must run instead (Kokkos Kernels absent,
// 16-bit or integer dtypes, operand layouts no BLAS takes, empty products).
#include <string>

#include "common.h"

namespace tessera::kokkos {
bool blas_matmul(const KernelCall& call);
bool blas_linear(const KernelCall& call);
bool blas_conv_fwd(const KernelCall& call);
bool blas_conv_dgrad(const KernelCall& call);
bool blas_conv_wgrad(const KernelCall& call);
/** What runs the GEMM-shaped ops in this build, for `tessera info`. */
std::string blas_description();
}  // namespace tessera::kokkos
