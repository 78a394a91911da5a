// GEMM for matmul (batched, broadcast batch axes, strided operands) and linear (fused bias +
// activation epilogue). f16/bf16 run on the tensor/matrix cores (tc_gemm.h) where the device
// has them; everything else, and f16/bf16 elsewhere, on a SIMT tiled GEMM: 16x16 output tiles,
// one thread per element, K walked in 16-deep slabs through shared memory, f32 accumulation.
#include <cstdlib>
#include <string>

#include "common.h"
#include "kernels.h"
#include "mma_gate.h"
#include "tessera/kernels/activation.h"
#include "tessera/kernels/convert.h"
#include "tc_gemm.h"
#include "tiled_gemm.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {
namespace {

template <class T> using acc_t = std::conditional_t<kernels::is_float_like_v<T>, compute_t<T>, int64_t>;

template <class T>
TESSERA_GLOBAL void gemm_kernel(const T* a, const T* b, T* c, const T* bias, GemmArgs g) {
  using Acc = acc_t<T>;
  TESSERA_SHARED_ARRAY(Acc, as, kTile * kTile);
  TESSERA_SHARED_ARRAY(Acc, bs, kTile * kTile);
  const int64_t tiles = g.tiles_m * g.tiles_n;
  const int64_t tile = block_x();
  const int64_t bi = tile / tiles, ti = (tile % tiles) / g.tiles_n, tj = tile % g.tiles_n;
  int64_t off[3];
  g.batch.offsets(bi, off);
  const T* ab = a + off[0];
  const T* bb = b + off[1];
  T* cb = c + off[2];
  tiled_gemm<Acc>(
      g.m, g.n, g.k, ti, tj, [&](int64_t r, int64_t q) { return static_cast<compute_t<T>>(ab[r * g.ars + q * g.acs]); },
      [&](int64_t q, int64_t col) { return static_cast<compute_t<T>>(bb[q * g.brs + col * g.bcs]); },
      [&](int64_t r, int64_t col, Acc acc) {
        if constexpr (kernels::is_float_like_v<T>) {
          Acc v = acc;
          if (bias) v += static_cast<Acc>(static_cast<compute_t<T>>(bias[col * g.bias_stride]));
          cb[r * g.ldc + col] = static_cast<T>(kernels::apply_activation(g.act, v));
        } else {
          cb[r * g.ldc + col] = static_cast<T>(acc);
        }
      },
      as, bs);
}

template <class T> void run_gemm(const T* a, const T* b, T* c, const T* bias, GemmArgs g, int64_t batches) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    if (run_tc_gemm<T>(a, b, c, bias, g, batches)) return;
  }
  g.tiles_m = (g.m + kTile - 1) / kTile;
  g.tiles_n = (g.n + kTile - 1) / kTile;
  const int64_t blocks = batches * g.tiles_m * g.tiles_n;
  TESSERA_CHECK(blocks < (int64_t{1} << 31), "matmul", "problem too large for one launch");
  launch(gemm_kernel<T>, Grid{static_cast<unsigned>(blocks)}, Grid{kTile * kTile}, 0, true, a, b, c, bias, g);
}

void matmul_op(const KernelCall& call) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  Tensor& out = call.outputs[0];
  const int64_t r = out.dim();
  GemmArgs g{};
  g.m = out.shape()[r - 2], g.n = out.shape()[r - 1], g.k = a.shape()[r - 1];
  g.ars = a.strides()[r - 2], g.acs = a.strides()[r - 1], g.brs = b.strides()[r - 2], g.bcs = b.strides()[r - 1];
  g.ldc = g.n;
  g.act = Activation::none;
  g.batch = backend_common::matmul_batch_indexer(a, b, out);
  const int64_t batches = out.numel() / std::max<int64_t>(g.m * g.n, 1);
  backend_common::dispatch_numeric(a.dtype(), "matmul", [&]<class T>() {
    run_gemm<T>(ptr<const T>(a), ptr<const T>(b), ptr<T>(out), nullptr, g, batches);
  });
}

void linear_op(const KernelCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const Tensor& bias = call.inputs[2];
  Tensor& out = call.outputs[0];
  GemmArgs g{};
  g.m = x.shape()[0], g.k = x.shape()[1], g.n = w.shape()[0];
  g.ars = x.strides()[0], g.acs = x.strides()[1];
  g.brs = w.strides()[1], g.bcs = w.strides()[0];  // B = w^T, read in place
  g.ldc = g.n;
  g.act = call.attrs.activation;
  g.bias_stride = bias.defined() ? bias.strides()[0] : 0;
  g.batch.contiguous = false;  // a single batch at offset 0
  backend_common::dispatch_float(x.dtype(), "linear", [&]<class T>() {
    run_gemm<T>(ptr<const T>(x), ptr<const T>(w), ptr<T>(out), bias.defined() ? ptr<const T>(bias) : nullptr, g, 1);
  });
}
template <class T> TESSERA_GLOBAL void bias_activation_kernel(int64_t total, int64_t n, T* out, const T* bias, int64_t bias_stride, Activation act) {
  for (int64_t i = global_index(); i < total; i += grid_stride()) {
    compute_t<T> v = static_cast<compute_t<T>>(out[i]);
    if (bias) v += static_cast<compute_t<T>>(bias[(i % n) * bias_stride]);
    out[i] = static_cast<T>(kernels::apply_activation(act, v));
  }
}
}  // namespace

void bias_activation(Tensor& out, const Tensor& bias, Activation act) {
  backend_common::dispatch_float(out.dtype(), "linear", [&]<class T>() {
    launch(bias_activation_kernel<T>, blocks_for(out.numel()), Grid{kThreads}, 0, false, out.numel(), out.size(-1), ptr<T>(out),
           bias.defined() ? ptr<const T>(bias) : nullptr, bias.defined() ? bias.strides()[0] : int64_t{0}, act);
  });
}

#if defined(__CUDACC__) && !defined(__HIPCC__)
// Compiled with the same targets as the MMA kernels: its attributes say what the device loads.
__global__ void mma_probe_kernel() {}
#endif

MmaKind device_mma_kind() {
  static const bool disabled = [] {
    const char* v = std::getenv("TESSERA_GPU_TENSOR_CORES");
    return v && std::string(v) == "0";
  }();
  if (disabled) return MmaKind::none;
#if defined(__HIPCC__)
  thread_local int cached_device = -1;
  thread_local MmaKind cached = MmaKind::none;
  int d = 0;
  TESSERA_GPU_CHECK(vendor::get_device(&d));
  if (d != cached_device) {
    DeviceProps p;
    TESSERA_GPU_CHECK(vendor::properties(d, p));
    cached = gate::hip_mfma_usable(p.arch, p.warp) ? MmaKind::mfma_16x16x16 : MmaKind::none;
    cached_device = d;
  }
  return cached;
#elif defined(__CUDACC__)
  thread_local int cached_device = -1;
  thread_local MmaKind cached = MmaKind::none;
  int d = 0;
  TESSERA_GPU_CHECK(vendor::get_device(&d));
  if (d != cached_device) {
    int major = 0, minor = 0;
    TESSERA_GPU_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d));
    TESSERA_GPU_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d));
    // The code object this device runs (SASS, or PTX JIT-compiled): its virtual architecture.
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, mma_probe_kernel) != cudaSuccess) (void)last_error(), attr.ptxVersion = 0;
    cached = gate::cuda_mma_usable(major * 10 + minor, attr.ptxVersion) ? MmaKind::mma_sync_16x8x16 : MmaKind::none;
    cached_device = d;
  }
  return cached;
#else
  return warp_size() == 64 ? MmaKind::mfma_16x16x16 : MmaKind::mma_sync_16x8x16;
#endif
}

void register_linalg(KernelTable& table) {
  table[OpId::Matmul] = &matmul_op;
  table[OpId::Linear] = &linear_op;
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
