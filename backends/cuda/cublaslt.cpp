// linear through cuBLASLt with the bias and activation fused into the GEMM's epilogue (one
// kernel, no second pass over the output). Covers f32/f16/bf16 with unit-stride rows of x and
// w and a contiguous bias, for the activations cuBLASLt has: none, ReLU and tanh-GELU (its GELU
// epilogue is the tanh approximation, so exact GELU and the others keep the separate epilogue
// kernel). Row-major out = x w^T is computed as the column-major out^T = (w^T)^T x^T, so the
// bias (one per output column) is the per-row bias cuBLASLt expects.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <climits>
#include <mutex>
#include <vector>

#include "tessera/backend/kernel.h"
#include "tessera/tensor.h"

namespace tessera {
namespace gpu::cuda {
cudaStream_t current_vendor_stream();  // backends/gpu/device_backend.cu
}
namespace cublas {
namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(detail::concat(what, " failed: cuBLASLt status ", static_cast<int>(s)));
}

cublasLtHandle_t lt_handle(int device) {
  static std::mutex m;
  static std::vector<cublasLtHandle_t> handles;
  std::lock_guard lock(m);
  if (static_cast<int>(handles.size()) <= device) handles.resize(static_cast<size_t>(device) + 1, nullptr);
  if (!handles[device]) {
    if (cudaSetDevice(device) != cudaSuccess) throw Error("cublasLt: cudaSetDevice failed");
    check(cublasLtCreate(&handles[device]), "cublasLtCreate");
  }
  return handles[device];
}

// Owns the descriptors of one call.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

bool epilogue_for(Activation act, bool bias, cublasLtEpilogue_t& e) {
  switch (act) {
    case Activation::none: e = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT; return true;
    case Activation::relu: e = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU; return true;
    case Activation::gelu_tanh: e = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU; return true;
    default: return false;
  }
}

bool data_type(DType dt, cudaDataType& t) {
  switch (dt) {
    case DType::f32: t = CUDA_R_32F; return true;
    case DType::f16: t = CUDA_R_16F; return true;
    case DType::bf16: t = CUDA_R_16BF; return true;
    default: return false;
  }
}
}  // namespace

/** Runs linear with a fused epilogue; false when cuBLASLt cannot express the call. */
bool cublaslt_linear(const KernelCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const Tensor& bias = call.inputs[2];
  Tensor& out = call.outputs[0];
  const int64_t m = x.shape()[0], k = x.shape()[1], n = w.shape()[0];
  cudaDataType type;
  cublasLtEpilogue_t epilogue;
  if (!data_type(x.dtype(), type) || !epilogue_for(call.attrs.activation, bias.defined(), epilogue)) return false;
  if (m == 0 || n == 0 || k == 0 || x.strides()[1] != 1 || w.strides()[1] != 1 || (bias.defined() && bias.strides()[0] != 1)) return false;
  const int64_t ldx = std::max<int64_t>(x.strides()[0], k), ldw = std::max<int64_t>(w.strides()[0], k);
  for (int64_t v : {m, n, k, ldx, ldw}) {
    if (v > INT_MAX) return false;
  }
  const int device = out.device().index;
  Descriptors d;
  check(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa), "set TRANSA");
  check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb), "set TRANSB");
  check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue), "set EPILOGUE");
  if (bias.defined()) {
    const void* bias_ptr = bias.data_ptr();
    check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr), "set BIAS_POINTER");
  }
  // A = w seen column-major: k x n (ld ldw), transposed; B = x seen column-major: k x m; C: n x m.
  check(cublasLtMatrixLayoutCreate(&d.a, type, static_cast<uint64_t>(k), static_cast<uint64_t>(n), ldw), "layout A");
  check(cublasLtMatrixLayoutCreate(&d.b, type, static_cast<uint64_t>(k), static_cast<uint64_t>(m), ldx), "layout B");
  check(cublasLtMatrixLayoutCreate(&d.c, type, static_cast<uint64_t>(n), static_cast<uint64_t>(m), n), "layout C");
  check(cublasLtMatmulPreferenceCreate(&d.pref), "cublasLtMatmulPreferenceCreate");
  const size_t workspace = 0;
  check(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace),
        "set MAX_WORKSPACE_BYTES");
  cublasLtHandle_t handle = lt_handle(device);
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &heuristic, &found) != CUBLAS_STATUS_SUCCESS ||
      found == 0) {
    return false;  // no algorithm for this shape/epilogue: the caller takes the unfused path
  }
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasLtMatmul(handle, d.op, &alpha, w.data_ptr(), d.a, x.data_ptr(), d.b, &beta, out.data_ptr(), d.c, out.data_ptr(), d.c,
                       &heuristic.algo, nullptr, 0, gpu::cuda::current_vendor_stream()),
        "cublasLtMatmul");
  return true;
}

}  // namespace cublas
}  // namespace tessera
