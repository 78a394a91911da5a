// rocBLAS for matmul and linear on the HIP backend, built only when rocBLAS is found (ROCm's
// own packages; Debian 12 has none, so CI compiles the HIP backend without this file and the
// HIP backend uses Tessera's GEMM). TESSERA_HIP_GEMM=tessera selects the own kernel anyway.
// Layout handling is shared with cuBLAS (backends/gpu/vendor_blas.h).
#include <hip/hip_runtime.h>
#if __has_include(<rocblas/rocblas.h>)
#include <rocblas/rocblas.h>
#else
#include <rocblas.h>
#endif

#include <cstdlib>
#include <cstring>
#include <vector>

#include "../gpu/vendor_blas.h"

namespace tessera {
namespace gpu::hip {
void bias_activation(Tensor& out, const Tensor& bias, Activation act);  // backends/gpu/linalg.cu
hipStream_t current_vendor_stream();                                     // backends/gpu/device_backend.cu
}

namespace rocblas {
namespace {

KernelFn g_own_matmul = nullptr, g_own_linear = nullptr;

void check(rocblas_status s, const char* what) {
  if (s != rocblas_status_success) throw Error(detail::concat(what, " failed: ", rocblas_status_to_string(s)));
}

// The calling thread's handle for `device`, pointed at its current stream. One handle per
// (thread, device), as cuBLAS handles are here (backends/cuda/handle_cache.h): a shared handle
// re-pointed with rocblas_set_stream by one thread while another's GEMM is being enqueued on it
// sends that GEMM to the wrong stream. Handles live until the process ends (destroying them in
// static teardown races the HIP runtime's own).
rocblas_handle handle(int device) {
  thread_local std::vector<rocblas_handle> handles;
  if (static_cast<int>(handles.size()) <= device) handles.resize(static_cast<size_t>(device) + 1, nullptr);
  if (!handles[device]) {
    int previous = 0;
    if (hipGetDevice(&previous) != hipSuccess || hipSetDevice(device) != hipSuccess) {
      (void)hipGetLastError();
      throw Error(detail::concat("rocblas: hipSetDevice(", device, ") failed"));
    }
    const rocblas_status st = rocblas_create_handle(&handles[device]);
    (void)hipSetDevice(previous);
    check(st, "rocblas_create_handle");
  }
  check(rocblas_set_stream(handles[device], gpu::hip::current_vendor_stream()), "rocblas_set_stream");  // only this thread uses it
  return handles[device];
}

bool types(DType dt, rocblas_datatype& data, rocblas_datatype& compute) {
  switch (dt) {
    case DType::f32: data = rocblas_datatype_f32_r, compute = rocblas_datatype_f32_r; return true;
    case DType::f16: data = rocblas_datatype_f16_r, compute = rocblas_datatype_f32_r; return true;
    case DType::bf16: data = rocblas_datatype_bf16_r, compute = rocblas_datatype_f32_r; return true;
    case DType::f64: data = rocblas_datatype_f64_r, compute = rocblas_datatype_f64_r; return true;
    default: return false;
  }
}

bool rocblas_gemm(const vendor_blas::Gemm& g) {
  rocblas_datatype data, compute;
  if (!types(g.dtype, data, compute)) return false;
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const bool f64 = g.dtype == DType::f64;
  const void* alpha = f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  const auto op = [](vendor_blas::Op o) { return o == vendor_blas::Op::N ? rocblas_operation_none : rocblas_operation_transpose; };
  rocblas_handle h = handle(g.device);  // on the thread's current (StreamGuard) stream
  check(rocblas_gemm_strided_batched_ex(h, op(g.op_a), op(g.op_b), g.m, g.n, g.k, alpha, g.a, data, g.lda, g.stride_a, g.b,
                                        data, g.ldb, g.stride_b, beta, g.c, data, g.ldc, g.stride_c, g.c, data, g.ldc, g.stride_c, g.batch,
                                        compute, rocblas_gemm_algo_standard, 0, 0),
        "rocblas_gemm_strided_batched_ex");
  return true;
}

void matmul(const KernelCall& call) {
  if (!vendor_blas::matmul(&rocblas_gemm, call)) g_own_matmul(call);
}

void linear(const KernelCall& call) {
  if (!vendor_blas::linear_product(&rocblas_gemm, call)) {
    g_own_linear(call);
    return;
  }
  if (call.inputs[2].defined() || call.attrs.activation != Activation::none) {
    gpu::hip::bias_activation(call.outputs[0], call.inputs[2], call.attrs.activation);
  }
}
}  // namespace

void install(KernelTable& table) {
  const char* choice = std::getenv("TESSERA_HIP_GEMM");
  if (choice && std::strcmp(choice, "tessera") == 0) return;
  g_own_matmul = table[OpId::Matmul];
  g_own_linear = table[OpId::Linear];
  table[OpId::Matmul] = &matmul;
  table[OpId::Linear] = &linear;
}

}  // namespace rocblas
}  // namespace tessera
