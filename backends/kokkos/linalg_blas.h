#pragma once
// The GEMM-shaped ops through Kokkos Kernels (linalg_blas.cpp); each returns false, having run
// nothing, when the team-tiled GEMM of linalg.cpp must run instead (Kokkos Kernels absent,
// 16-bit or integer dtypes, operand layouts no BLAS takes, empty products).
#include <string>
#include <vector>

#include "common.h"
#include "tessera/backend/backend.h"

namespace tessera::kokkos {
bool blas_matmul(const KernelCall& call);
bool blas_linear(const KernelCall& call);
bool blas_conv_fwd(const KernelCall& call);
bool blas_conv_dgrad(const KernelCall& call);
bool blas_conv_wgrad(const KernelCall& call);
/** What runs the GEMM-shaped ops in this build, for `tessera info`. */
std::string blas_description();
/**
 * The ops that go through the vendor BLAS in this build (none without Kokkos Kernels or with
 * TESSERA_KOKKOS_BLAS=off): a BLAS may split its loops by thread count (OpenBLAS splits K when
 * M x N is small), so their results can change with the BLAS's thread count. Deterministic mode runs
 * the team-tiled GEMM for them, whose order depends on the shapes alone.
 */
std::vector<NondeterministicOp> blas_nondeterministic_ops();
}  // namespace tessera::kokkos
