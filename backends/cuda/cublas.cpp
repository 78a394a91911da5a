// cuBLAS for matmul and linear on the CUDA backend (the default; TESSERA_CUDA_GEMM=tessera
// selects Tessera's own GEMM kernel for comparison). linear tries cuBLASLt with the bias and
// activation fused into the epilogue first (cublaslt.cpp), then cuBLAS plus Tessera's
// epilogue kernel. Layout handling is shared with rocBLAS in backends/gpu/vendor_blas.h.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "../gpu/vendor_blas.h"
#include "handle_cache.h"
#include "tessera/runtime.h"

namespace tessera {
namespace gpu::cuda {
void bias_activation(Tensor& out, const Tensor& bias, Activation act);  // backends/gpu/linalg.cu
cudaStream_t current_vendor_stream();                                    // backends/gpu/device_backend.cu
void add_capture_prepare_hook(void (*hook)(int device));                 // backends/gpu/device_backend.cu
}

namespace cublas {
bool cublaslt_linear(const KernelCall& call);  // cublaslt.cpp
void prepare_lt_for_capture(int device);       // cublaslt.cpp

namespace {

KernelFn g_own_matmul = nullptr, g_own_linear = nullptr;

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(detail::concat(what, " failed: cuBLAS status ", static_cast<int>(s)));
}

// The calling thread's handle for the device and its current stream (handle_cache.h).
cublasHandle_t handle(int device) {
  return cuda_libs::cached_handle<cublasHandle_t>(device, gpu::cuda::current_vendor_stream(), [](int, cudaStream_t stream) {
    cublasHandle_t h = nullptr;
    check(cublasCreate(&h), "cublasCreate");
    check(cublasSetStream(h, stream), "cublasSetStream");
    return h;
  });
}

// f32 stays strict f32 unless TF32 was allowed (set_allow_tf32).
bool types(DType dt, cudaDataType& data, cublasComputeType_t& compute) {
  switch (dt) {
    case DType::f32: data = CUDA_R_32F, compute = allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; return true;
    case DType::f16: data = CUDA_R_16F, compute = CUBLAS_COMPUTE_32F; return true;
    case DType::bf16: data = CUDA_R_16BF, compute = CUBLAS_COMPUTE_32F; return true;
    case DType::f64: data = CUDA_R_64F, compute = CUBLAS_COMPUTE_64F; return true;
    default: return false;
  }
}

bool cublas_gemm(const vendor_blas::Gemm& g) {
  cudaDataType data;
  cublasComputeType_t compute;
  if (!types(g.dtype, data, compute)) return false;
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const bool f64 = g.dtype == DType::f64;
  const auto op = [](vendor_blas::Op o) { return o == vendor_blas::Op::N ? CUBLAS_OP_N : CUBLAS_OP_T; };
  const cuda_libs::DeviceGuard guard(g.device, "cublas");
  cublasHandle_t h = handle(g.device);
  check(cublasGemmStridedBatchedEx(h, op(g.op_a), op(g.op_b), g.m, g.n, g.k, f64 ? static_cast<const void*>(&one_d) : &one_f,
                                   g.a, data, g.lda, g.stride_a, g.b, data, g.ldb, g.stride_b,
                                   f64 ? static_cast<const void*>(&zero_d) : &zero_f, g.c, data, g.ldc, g.stride_c, g.batch, compute,
                                   CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx");
  return true;
}

void matmul(const KernelCall& call) {
  if (!vendor_blas::matmul(&cublas_gemm, call)) g_own_matmul(call);
}

void linear(const KernelCall& call) {
  if (cublaslt_linear(call)) return;
  if (!vendor_blas::linear_product(&cublas_gemm, call)) {
    g_own_linear(call);
    return;
  }
  if (call.inputs[2].defined() || call.attrs.activation != Activation::none) {
    gpu::cuda::bias_activation(call.outputs[0], call.inputs[2], call.attrs.activation);
  }
}
}  // namespace

void install(KernelTable& table) {
  const char* choice = std::getenv("TESSERA_CUDA_GEMM");
  if (choice && std::strcmp(choice, "tessera") == 0) return;
  g_own_matmul = table[OpId::Matmul];
  g_own_linear = table[OpId::Linear];
  table[OpId::Matmul] = &matmul;
  table[OpId::Linear] = &linear;
  // Handles (and cuBLASLt's workspace) for a capture stream exist before its capture begins.
  gpu::cuda::add_capture_prepare_hook([](int device) {
    (void)handle(device);
    prepare_lt_for_capture(device);
  });
}

}  // namespace cublas
}  // namespace tessera
