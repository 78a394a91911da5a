// cuBLAS for matmul and linear on the CUDA backend (the default; TESSERA_CUDA_GEMM=tessera
// selects Tessera's own GEMM kernel for comparison). Row-major operands are passed as the
// column-major product C^T = B^T A^T; layouts cuBLAS cannot express (no unit stride inside a
// matrix, batch axes that do not flatten to one stride, sizes beyond int) fall back to the
// own kernel.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "../common/strided_loop.h"
#include "tessera/backend/kernel.h"
#include "tessera/tensor.h"

namespace tessera {
namespace gpu::cuda {
void bias_activation(Tensor& out, const Tensor& bias, Activation act);  // backends/gpu/linalg.cu
}

namespace cublas {
namespace {

KernelFn g_own_matmul = nullptr, g_own_linear = nullptr;

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(detail::concat(what, " failed: cuBLAS status ", static_cast<int>(s)));
}

cublasHandle_t handle(int device) {
  static std::mutex m;
  static std::vector<cublasHandle_t> handles;
  std::lock_guard lock(m);
  if (static_cast<int>(handles.size()) <= device) handles.resize(static_cast<size_t>(device) + 1, nullptr);
  if (!handles[device]) {
    if (cudaSetDevice(device) != cudaSuccess) throw Error("cublas: cudaSetDevice failed");
    check(cublasCreate(&handles[device]), "cublasCreate");
  }
  return handles[device];
}

// A row-major [rows, cols] operand with strides (rs, cs), seen as the column-major transpose.
struct Operand {
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 0;
  bool ok = false;
};
Operand operand(int64_t rs, int64_t cs, int64_t rows, int64_t cols) {
  if (cs == 1 && (rows == 1 || rs >= cols)) return {CUBLAS_OP_N, std::max<int64_t>({rs, cols, 1}), true};
  if (rs == 1 && (cols == 1 || cs >= rows)) return {CUBLAS_OP_T, std::max<int64_t>({cs, rows, 1}), true};
  return {};
}

bool types(DType dt, cudaDataType& data, cublasComputeType_t& compute) {
  switch (dt) {
    case DType::f32: data = CUDA_R_32F, compute = CUBLAS_COMPUTE_32F; return true;
    case DType::f16: data = CUDA_R_16F, compute = CUBLAS_COMPUTE_32F; return true;
    case DType::bf16: data = CUDA_R_16BF, compute = CUBLAS_COMPUTE_32F; return true;
    case DType::f64: data = CUDA_R_64F, compute = CUBLAS_COMPUTE_64F; return true;
    default: return false;
  }
}

bool fits(std::initializer_list<int64_t> v) {
  for (int64_t x : v) {
    if (x < 0 || x > INT_MAX) return false;
  }
  return true;
}

// C [batch, m, n] (contiguous) = A [batch, m, k] @ B [batch, k, n]; false when unsupported.
bool gemm(int device, DType dt, int64_t m, int64_t n, int64_t k, const void* a, int64_t ars, int64_t acs, int64_t a_bs,
          const void* b, int64_t brs, int64_t bcs, int64_t b_bs, void* c, int64_t batch) {
  cudaDataType data;
  cublasComputeType_t compute;
  if (!types(dt, data, compute)) return false;
  const Operand oa = operand(ars, acs, m, k), ob = operand(brs, bcs, k, n);
  if (!oa.ok || !ob.ok || !fits({m, n, k, oa.ld, ob.ld, batch})) return false;
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const void* alpha = dt == DType::f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = dt == DType::f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  check(cublasGemmStridedBatchedEx(handle(device), ob.op, oa.op, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), alpha,
                                   b, data, static_cast<int>(ob.ld), b_bs, a, data, static_cast<int>(oa.ld), a_bs, beta, c, data,
                                   static_cast<int>(n), m * n, static_cast<int>(batch), compute, CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx");
  return true;
}

void matmul(const KernelCall& call) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  Tensor& out = call.outputs[0];
  const int64_t r = out.dim();
  // The batch axes must flatten to one stride per operand.
  const Shape batch(out.shape().begin(), out.shape().end() - 2);
  const Tensor ab = a.slice(-1, 0, 1).slice(-2, 0, 1), bb = b.slice(-1, 0, 1).slice(-2, 0, 1), cb = out.slice(-1, 0, 1).slice(-2, 0, 1);
  Shape bshape = batch;
  bshape.insert(bshape.end(), {1, 1});
  const auto plan = backend_common::make_plan<3>(bshape, {&ab, &bb, &cb});
  const int64_t item = static_cast<int64_t>(a.itemsize());
  if (plan.ndim <= 1) {
    const int64_t a_bs = plan.ndim ? plan.strides[1][0] / item : 0, b_bs = plan.ndim ? plan.strides[2][0] / item : 0;
    const int64_t m = out.shape()[r - 2], n = out.shape()[r - 1], k = a.shape()[r - 1];
    if (gemm(out.device().index, a.dtype(), m, n, k, a.data_ptr(), a.strides()[r - 2], a.strides()[r - 1], a_bs, b.data_ptr(),
             b.strides()[r - 2], b.strides()[r - 1], b_bs, out.data_ptr(), numel(batch))) {
      return;
    }
  }
  g_own_matmul(call);
}

void linear(const KernelCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  Tensor& out = call.outputs[0];
  const int64_t m = x.shape()[0], k = x.shape()[1], n = w.shape()[0];
  // B = w^T read in place: walking k moves along w's columns, n along its rows.
  if (!gemm(out.device().index, x.dtype(), m, n, k, x.data_ptr(), x.strides()[0], x.strides()[1], 0, w.data_ptr(), w.strides()[1],
            w.strides()[0], 0, out.data_ptr(), 1)) {
    g_own_linear(call);
    return;
  }
  if (call.inputs[2].defined() || call.attrs.activation != Activation::none) gpu::cuda::bias_activation(out, call.inputs[2], call.attrs.activation);
}
}  // namespace

void install(KernelTable& table) {
  const char* choice = std::getenv("TESSERA_CUDA_GEMM");
  if (choice && std::strcmp(choice, "tessera") == 0) return;
  g_own_matmul = table[OpId::Matmul];
  g_own_linear = table[OpId::Linear];
  table[OpId::Matmul] = &matmul;
  table[OpId::Linear] = &linear;
}

}  // namespace cublas
}  // namespace tessera
