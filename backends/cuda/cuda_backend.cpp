// The CUDA backend: runtime API only (no libcuda link), device memory through the caching
// allocator (on OOM the cache is released and the allocation retried once, then
// tessera::OutOfMemory carries the stats), synchronous default-stream copies, and the kernels
// of backends/gpu compiled by nvcc. Without a usable driver the backend reports zero devices
// and the reason, and its tests are skipped.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "tessera/backend/registry.h"
#include "tessera/error.h"

namespace tessera {
// Defined by backends/gpu/*.cu compiled with nvcc (their inline namespace is `cuda`).
namespace gpu::cuda {
void register_elementwise(KernelTable& table);
void register_reductions(KernelTable& table);
void register_linalg(KernelTable& table);
void register_indexing(KernelTable& table);
void register_nn(KernelTable& table);
}  // namespace gpu::cuda

namespace {

#define TESSERA_CUDA_CHECK(call)                                                                          \
  do {                                                                                                    \
    const cudaError_t e_ = (call);                                                                        \
    if (e_ != cudaSuccess)                                                                                \
      throw Error(detail::concat(#call, " failed at ", __FILE__, ":", __LINE__, ": ", cudaGetErrorString(e_))); \
  } while (0)

class DeviceMemory final : public RawAllocator {
 public:
  explicit DeviceMemory(int device) : device_(device) {}
  void* raw_alloc(size_t nbytes) override {
    TESSERA_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    if (cudaMalloc(&p, nbytes) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky OOM error; the allocator retries or throws
      return nullptr;
    }
    return p;
  }
  void raw_free(void* p) override { (void)cudaFree(p); }
  bool host_accessible() const override { return false; }

 private:
  int device_;
};

struct Probe {
  int count = 0;
  std::string reason;
};

Probe probe() {
  Probe p;
  const cudaError_t e = cudaGetDeviceCount(&p.count);
  if (e != cudaSuccess) {
    p.count = 0;  // NOTE: the count is left unwritten on failure (e.g. 35, insufficient driver)
    p.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e) + " (error " + std::to_string(static_cast<int>(e)) + ")";
    (void)cudaGetLastError();
  } else if (p.count == 0) {
    p.reason = "no CUDA device present";
  }
  return p;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend() : probe_(probe()) {
    for (int i = 0; i < probe_.count; ++i) {
      memory_.push_back(std::make_unique<DeviceMemory>(i));
      allocators_.push_back(std::make_unique<CachingAllocator>("cuda:" + std::to_string(i), *memory_.back()));
    }
    gpu::cuda::register_elementwise(kernels_);
    gpu::cuda::register_reductions(kernels_);
    gpu::cuda::register_linalg(kernels_);
    gpu::cuda::register_indexing(kernels_);
    gpu::cuda::register_nn(kernels_);
  }
  const char* name() const override { return "cuda"; }
  DeviceType device_type() const override { return DeviceType::cuda; }
  int device_count() const override { return probe_.count; }
  std::string unavailable_reason() const override { return probe_.reason; }
  DeviceInfo device_info(int i) const override {
    cudaDeviceProp prop{};
    TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
    DeviceInfo info;
    info.name = prop.name;
    info.total_memory = static_cast<int64_t>(prop.totalGlobalMem);
    info.compute_units = prop.multiProcessorCount;
    info.properties = {{"compute capability", std::to_string(prop.major) + "." + std::to_string(prop.minor)},
                       {"warp size", std::to_string(prop.warpSize)}};
    return info;
  }
  std::vector<std::pair<std::string, std::string>> build_info() const override {
    int runtime = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    return {{"CUDA runtime", std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10)},
            {"targets", TESSERA_CUDA_ARCHITECTURES},
            {"kernels", std::to_string(kernels_.count()) + "/" + std::to_string(kOpCount) + " ops"}};
  }
  CachingAllocator& allocator(int i) override { return *allocators_.at(static_cast<size_t>(i)); }
  bool host_accessible() const override { return false; }
  void copy_from_host(void* dst, const void* src, size_t n, int) override {
    TESSERA_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
  }
  void copy_to_host(void* dst, const void* src, size_t n, int) override {
    TESSERA_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
  }
  void copy_on_device(void* dst, int dst_device, const void* src, int src_device, size_t n) override {
    if (dst_device == src_device) TESSERA_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice));
    else TESSERA_CUDA_CHECK(cudaMemcpyPeer(dst, dst_device, src, src_device, n));
  }
  void synchronize(int i) override {
    TESSERA_CUDA_CHECK(cudaSetDevice(i));
    TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  Probe probe_;
  std::vector<std::unique_ptr<DeviceMemory>> memory_;
  std::vector<std::unique_ptr<CachingAllocator>> allocators_;
};
}  // namespace

void register_cuda_backend() { register_backend(std::make_unique<CudaBackend>()); }

}  // namespace tessera
