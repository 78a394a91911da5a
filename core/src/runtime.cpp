// Process-level controls that go through the backend registry.
#include "tessera/runtime.h"

#include "tessera/backend/registry.h"

namespace tessera {

void synchronize(Device device) { backend_for_device(device, "synchronize").synchronize(device.index); }
AllocatorStats memory_stats(Device device) {
  return backend_for_device(device, "memory_stats").allocator(device.index).stats();
}
void set_memory_limit(Device device, int64_t bytes) {
  backend_for_device(device, "set_memory_limit").allocator(device.index).set_limit(bytes);
}
void empty_cache(Device device) { backend_for_device(device, "empty_cache").allocator(device.index).empty_cache(); }


}  // namespace tessera
