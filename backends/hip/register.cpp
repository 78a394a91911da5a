// Registers the HIP backend: backends/gpu built by hipcc (inline namespace `hip`), with rocBLAS
// replacing matmul/linear when the build found it (TESSERA_HAVE_ROCBLAS).
#include <memory>

#include "tessera/backend/registry.h"

namespace tessera {
namespace gpu::hip {
std::unique_ptr<Backend> make_device_backend(const char* name, DeviceType type, const char* targets,
                                             void (*customize)(KernelTable&));
}

#ifdef TESSERA_HAVE_ROCBLAS
namespace rocblas {
void install(KernelTable& table);
}
constexpr void (*kCustomize)(KernelTable&) = &rocblas::install;
#else
constexpr void (*kCustomize)(KernelTable&) = nullptr;
#endif

void register_hip_backend() {
  register_backend(gpu::hip::make_device_backend("hip", DeviceType::hip, TESSERA_GPU_TARGETS, kCustomize));
}

}  // namespace tessera
