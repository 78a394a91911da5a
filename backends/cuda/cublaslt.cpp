// linear through cuBLASLt with the bias and activation fused into the GEMM's epilogue (one
// kernel, no second pass over the output). Covers f32/f16/bf16 with unit-stride rows of x and
// w and a contiguous bias, for the activations cuBLASLt has: none, ReLU and tanh-GELU (its GELU
// epilogue is the tanh approximation, so exact GELU and the others keep the separate epilogue
// kernel). Row-major out = x w^T is computed as the column-major out^T = (w^T)^T x^T, so the
// bias (one per output column) is the per-row bias cuBLASLt expects.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <climits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include "../gpu/stream_cache.h"
#include "handle_cache.h"
#include "lt_plan.h"
#include "tessera/backend/kernel.h"
#include "tessera/runtime.h"
#include "tessera/tensor.h"

namespace tessera {
namespace gpu::cuda {
cudaStream_t current_vendor_stream();  // backends/gpu/device_backend.cu
const void* current_stream_key();
void add_stream_release_hook(void (*hook)(const void* stream_key));
}
namespace cublas {
namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(detail::concat(what, " failed: cuBLASLt status ", static_cast<int>(s)));
}

// cuBLASLt picks faster kernels (split-K, stream-K) when it has a workspace: 32 MiB covers
// what NVIDIA recommends for Hopper (and is 8x Ampere's recommendation).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// What the heuristic depends on (lt_plan.h): the chosen algorithm is reused for every call with this key.
using AlgoKey = LtAlgoKey;

// The handle for one (device, stream): the workspace it passes to cublasLtMatmul and the
// algorithms already chosen, so the heuristic runs once per shape. Kernels on one stream run in
// order, so threads sharing a stream share the workspace safely; the entry goes (workspace
// freed) when its stream is destroyed. Graph captures reuse one stream per thread and device
// (device_backend.cu), so a captured graph's workspace lives as long as that stream: replays of
// graphs captured on one thread and device must not run concurrently on different streams.
struct LtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::mutex mutex;  // guards algos (threads sharing a stream)
  std::map<AlgoKey, std::optional<cublasLtMatmulAlgo_t>> algos;  // nullopt: cuBLASLt has none for this key
};

gpu::StreamCache<LtContext>& lt_cache();

void release_stream_contexts(const void* stream_key) {
  lt_cache().release_stream(stream_key, [](LtContext& ctx) {
    if (ctx.workspace) (void)cudaFree(ctx.workspace);
    (void)cublasLtDestroy(ctx.handle);
  });
}

gpu::StreamCache<LtContext>& lt_cache() {
  static auto* cache = [] {
    gpu::cuda::add_stream_release_hook(&release_stream_contexts);
    return new gpu::StreamCache<LtContext>;  // never destroyed: static teardown races the CUDA runtime's
  }();
  return *cache;
}

LtContext& lt_context(int device) {
  return lt_cache().get(device, gpu::cuda::current_stream_key(), [](LtContext& ctx) {
    check(cublasLtCreate(&ctx.handle), "cublasLtCreate");
    if (cudaMalloc(&ctx.workspace, kWorkspaceBytes) == cudaSuccess) ctx.workspace_bytes = kWorkspaceBytes;
    else (void)cudaGetLastError(), ctx.workspace = nullptr;
  });
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

/** Makes the calling thread's handle and workspace for the current stream (before a capture). */
void prepare_lt_for_capture(int device) {
  const cuda_libs::DeviceGuard guard(device, "cublasLt");
  (void)lt_context(device);
}

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
  LtOperands operands{m, n, k, x.strides()[0], x.strides()[1], w.strides()[0], w.strides()[1], bias.defined(),
                      bias.defined() ? bias.strides()[0] : 1, reinterpret_cast<uintptr_t>(x.data_ptr()),
                      reinterpret_cast<uintptr_t>(w.data_ptr()), reinterpret_cast<uintptr_t>(out.data_ptr()),
                      bias.defined() ? reinterpret_cast<uintptr_t>(bias.data_ptr()) : 0};
  const LtPlan plan = plan_lt_linear(operands);
  if (!plan.eligible) return false;
  const int64_t ldx = plan.ldx, ldw = plan.ldw;
  const int device = out.device().index;
  const cuda_libs::DeviceGuard guard(device, "cublasLt");
  const cudaStream_t stream = gpu::cuda::current_vendor_stream();
  LtContext& ctx = lt_context(device);
  const bool tf32 = x.dtype() == DType::f32 && allow_tf32();  // f32 is strict f32 unless allowed
  Descriptors d;
  check(cublasLtMatmulDescCreate(&d.op, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
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
  const AlgoKey key = lt_algo_key(operands, plan, static_cast<int>(type), static_cast<int>(epilogue), tf32);
  std::unique_lock algos_lock(ctx.mutex);
  auto algo = ctx.algos.find(key);
  if (algo == ctx.algos.end()) {
    check(cublasLtMatmulPreferenceCreate(&d.pref), "cublasLtMatmulPreferenceCreate");
    check(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx.workspace_bytes,
                                               sizeof ctx.workspace_bytes),
          "set MAX_WORKSPACE_BYTES");
    // The operands' real alignments: an offset view gets an algorithm that can run on it.
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, plan.align_w}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, plan.align_x},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, plan.align_out}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, plan.align_out}};
    for (const auto& [attr, bytes] : aligns) {
      check(cublasLtMatmulPreferenceSetAttribute(d.pref, attr, &bytes, sizeof bytes), "set MIN_ALIGNMENT");
    }
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    const bool ok =
        cublasLtMatmulAlgoGetHeuristic(ctx.handle, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &heuristic, &found) == CUBLAS_STATUS_SUCCESS && found > 0;
    algo = ctx.algos.emplace(key, ok ? std::optional(heuristic.algo) : std::nullopt).first;
  }
  if (!algo->second) return false;  // no algorithm for this shape/epilogue: the caller takes the unfused path
  const cublasLtMatmulAlgo_t chosen = *algo->second;
  algos_lock.unlock();
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasLtMatmul(ctx.handle, d.op, &alpha, w.data_ptr(), d.a, x.data_ptr(), d.b, &beta, out.data_ptr(), d.c, out.data_ptr(), d.c,
                       &chosen, ctx.workspace, ctx.workspace_bytes, stream),
        "cublasLtMatmul");
  return true;
}

}  // namespace cublas
}  // namespace tessera
