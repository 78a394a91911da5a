// Registers the HIP backend: backends/gpu built by hipcc (inline namespace `hip`).
#include <memory>

#include "tessera/backend/registry.h"

namespace tessera {
namespace gpu::hip {
std::unique_ptr<Backend> make_device_backend(const char* name, DeviceType type, const char* targets,
                                             void (*customize)(KernelTable&));
}

void register_hip_backend() { register_backend(gpu::hip::make_device_backend("hip", DeviceType::hip, TESSERA_GPU_TARGETS, nullptr)); }

}  // namespace tessera
