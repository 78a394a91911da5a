// Registers the CUDA backend: backends/gpu built by nvcc (inline namespace `cuda`).
#include <memory>

#include "tessera/backend/registry.h"

namespace tessera {
namespace gpu::cuda {
std::unique_ptr<Backend> make_device_backend(const char* name, DeviceType type, const char* targets);
}

void register_cuda_backend() { register_backend(gpu::cuda::make_device_backend("cuda", DeviceType::cuda, TESSERA_GPU_TARGETS)); }

}  // namespace tessera
