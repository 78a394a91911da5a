// Process-level controls that go through the backend registry.
#include "tessera/runtime.h"

#include <cstring>

#include "tessera/backend/registry.h"
#include "tessera/ops/creation.h"
#include "tessera/tensor.h"

namespace tessera {

void synchronize(Device device) { backend_for_device(device, "synchronize").synchronize(device.index); }
AllocatorStats memory_stats(Device device) {
  return backend_for_device(device, "memory_stats").allocator(device.index).stats();
}
void set_memory_limit(Device device, int64_t bytes) {
  backend_for_device(device, "set_memory_limit").allocator(device.index).set_limit(bytes);
}
void empty_cache(Device device) { backend_for_device(device, "empty_cache").allocator(device.index).empty_cache(); }


Tensor pin_memory(const Tensor& host, Device device) {
  TESSERA_CHECK(host.device() == kCPU, "pin_memory", "expected a cpu tensor, got one on ", host.device().str());
  Backend& b = backend_for_device(device, "pin_memory");
  const Tensor src = host.contiguous();
  void* p = b.allocate_pinned(std::max<size_t>(src.nbytes(), 1));
  if (!p) return src;
  std::memcpy(p, src.data_ptr(), src.nbytes());
  auto storage = std::make_shared<Storage>(kCPU, p, src.nbytes(), [&b](void* q) { b.free_pinned(q); });
  return detail::make_tensor(std::move(storage), src.shape(), contiguous_strides(src.shape()), 0, src.dtype());
}

Tensor to_device_async(const Tensor& host, Device device, Stream& stream) {
  TESSERA_CHECK(host.device() == kCPU && host.is_contiguous(), "to_device_async", "expected a contiguous cpu tensor");
  if (device == kCPU) return host;
  Backend& b = backend_for_device(device, "to_device_async");
  Tensor out = empty(host.shape(), host.dtype(), device);
  if (out.nbytes() > 0) b.copy_from_host_async(out.data_ptr(), host.data_ptr(), out.nbytes(), device.index, stream);
  return out;
}

}  // namespace tessera
