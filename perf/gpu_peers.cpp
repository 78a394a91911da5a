// GPU peers for `tessera bench`, compiled when the CUDA or HIP backend is built: the vendor
// BLAS sgemm (cuBLAS; on AMD rocBLAS is not in Debian, so no GEMM peer) and a device-to-device
// memcpy as the bandwidth bar. Each peer owns its device buffers and synchronises the device
// after its call, like the engine's timed calls.
#include <memory>
#include <vector>

#include "peers.h"

#if defined(TESSERA_BENCH_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#elif defined(TESSERA_BENCH_HIP)
#include <hip/hip_runtime_api.h>
#endif

namespace tessera::bench::peers {
namespace {
#if defined(TESSERA_BENCH_CUDA)
struct DeviceBuffers {
  int device = 0;
  std::vector<void*> ptrs;
  ~DeviceBuffers() {
    cudaSetDevice(device);
    for (void* p : ptrs) cudaFree(p);
  }
  bool add(size_t bytes) {
    void* p = nullptr;
    if (cudaSetDevice(device) != cudaSuccess || cudaMalloc(&p, bytes) != cudaSuccess) return false;
    cudaMemset(p, 0, bytes);
    ptrs.push_back(p);
    return true;
  }
};
#endif
}  // namespace

std::optional<Peer> vendor_gemm(Device dev, DType dt, int64_t m, int64_t n, int64_t k) {
#if defined(TESSERA_BENCH_CUDA)
  if (dev.type != DeviceType::cuda || (dt != DType::f32 && dt != DType::bf16 && dt != DType::f16)) return std::nullopt;
  auto buf = std::make_shared<DeviceBuffers>();
  buf->device = dev.index;
  const size_t es = dt == DType::f32 ? 4 : 2;
  if (!buf->add(es * m * k) || !buf->add(es * k * n) || !buf->add(es * m * n)) return std::nullopt;
  auto handle = std::make_shared<cublasHandle_t>();
  if (cublasCreate(handle.get()) != CUBLAS_STATUS_SUCCESS) return std::nullopt;
  std::shared_ptr<void> destroy(nullptr, [handle](void*) { cublasDestroy(*handle); });
  if (dt != DType::f32) {
    const cudaDataType_t t = dt == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    return Peer{"cublas", [=] {
                  (void)destroy;
                  const float one = 1.0f, zero = 0.0f;
                  cublasGemmEx(*handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one,
                               buf->ptrs[1], t, static_cast<int>(n), buf->ptrs[0], t, static_cast<int>(k), &zero, buf->ptrs[2], t,
                               static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                  cudaDeviceSynchronize();
                }};
  }
  return Peer{"cublas", [=] {
                (void)destroy;
                const float one = 1.0f, zero = 0.0f;
                // Row-major C = A B as column-major C^T = B^T A^T.
                cublasSgemm(*handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one,
                            static_cast<const float*>(buf->ptrs[1]), static_cast<int>(n), static_cast<const float*>(buf->ptrs[0]),
                            static_cast<int>(k), &zero, static_cast<float*>(buf->ptrs[2]), static_cast<int>(n));
                cudaDeviceSynchronize();
              }};
#else
  (void)dev, (void)dt, (void)m, (void)n, (void)k;
  return std::nullopt;
#endif
}

std::optional<Peer> device_copy(Device dev, int64_t bytes) {
#if defined(TESSERA_BENCH_CUDA)
  if (dev.type != DeviceType::cuda) return std::nullopt;
  auto buf = std::make_shared<DeviceBuffers>();
  buf->device = dev.index;
  if (!buf->add(static_cast<size_t>(bytes)) || !buf->add(static_cast<size_t>(bytes))) return std::nullopt;
  return Peer{"cuda_memcpy", [=] {
                cudaMemcpy(buf->ptrs[1], buf->ptrs[0], static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice);
                cudaDeviceSynchronize();
              },
              2.0 * static_cast<double>(bytes)};
#elif defined(TESSERA_BENCH_HIP)
  if (dev.type != DeviceType::hip) return std::nullopt;
  struct HipBuffers {
    void *src = nullptr, *dst = nullptr;
    ~HipBuffers() {
      if (src) (void)hipFree(src);
      if (dst) (void)hipFree(dst);
    }
  };
  auto buf = std::make_shared<HipBuffers>();
  if (hipSetDevice(dev.index) != hipSuccess || hipMalloc(&buf->src, static_cast<size_t>(bytes)) != hipSuccess ||
      hipMalloc(&buf->dst, static_cast<size_t>(bytes)) != hipSuccess) {
    return std::nullopt;
  }
  return Peer{"hip_memcpy", [=] {
                (void)hipMemcpy(buf->dst, buf->src, static_cast<size_t>(bytes), hipMemcpyDeviceToDevice);
                (void)hipDeviceSynchronize();
              },
              2.0 * static_cast<double>(bytes)};
#else
  (void)dev, (void)bytes;
  return std::nullopt;
#endif
}

}  // namespace tessera::bench::peers
