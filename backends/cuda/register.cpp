// Registers the CUDA backend: backends/gpu built by nvcc (inline namespace `cuda`), with
// cuBLAS replacing matmul/linear unless TESSERA_CUDA_GEMM=tessera, and cuDNN replacing the
// convolutions when it was found (unless TESSERA_CUDA_CONV=tessera).
#include <memory>

#include "tessera/backend/registry.h"

namespace tessera {
namespace gpu::cuda {
std::unique_ptr<Backend> make_device_backend(const char* name, DeviceType type, const char* targets,
                                             void (*customize)(KernelTable&));
}
namespace cublas {
void install(KernelTable& table);
}
#ifdef TESSERA_HAVE_CUDNN
namespace cudnn {
void install(KernelTable& table);
}
#endif

namespace {
void install_vendor_libraries(KernelTable& table) {
  cublas::install(table);
#ifdef TESSERA_HAVE_CUDNN
  cudnn::install(table);
#endif
}
}  // namespace

void register_cuda_backend() {
  register_backend(gpu::cuda::make_device_backend("cuda", DeviceType::cuda, TESSERA_GPU_TARGETS, &install_vendor_libraries));
}

}  // namespace tessera
