// The emulated GPU backend: device type `emulated`, memory in host RAM but reached only through
// the device copy calls (like a discrete GPU), kernels from backends/gpu run by the CPU
// emulation of the execution model (execution.h). It exists to verify the GPU kernels.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "../gpu/device_errors.h"
#include "../gpu/kernels.h"
#include "execution.h"
#include "tessera/backend/registry.h"
#include "tessera/runtime.h"

namespace tessera {
namespace {
gpu::DeviceErrorSlot g_error_slot;  // "device memory" of the one emulated device
std::atomic<bool> g_error_armed{false};

// The host waits for the device here: count it and raise what kernels reported since the last sync.
void host_sync() {
  detail::note_host_sync();
  if (!g_error_armed.exchange(false)) return;
  const gpu::DeviceErrorSlot s = g_error_slot;
  if (s.op == 0) return;
  g_error_slot = {};
  throw Error(gpu::device_error_message(s));
}

class EmulatedMemory final : public RawAllocator {
 public:
  void* raw_alloc(size_t nbytes) override { return std::aligned_alloc(256, (nbytes + 255) / 256 * 256); }
  void raw_free(void* p) override { std::free(p); }
  bool host_accessible() const override { return true; }  // guard bytes can be checked
};

class EmulatedBackend final : public Backend {
 public:
  EmulatedBackend() : allocator_("emulated:0", memory_) {
    if (const char* g = std::getenv("TESSERA_ALLOC_GUARD"); g && std::strcmp(g, "0") != 0) allocator_.set_guards(true);
    gpu::emulated::register_all(kernels_);
  }
  const char* name() const override { return "emulated"; }
  DeviceType device_type() const override { return DeviceType::emulated; }
  int device_count() const override { return 1; }
  DeviceInfo device_info(int) const override {
    const auto& s = emu::settings();
    const char* sched = s.schedule == emu::Schedule::forward ? "forward" : s.schedule == emu::Schedule::reverse ? "reverse" : "random";
    return {"CPU emulation of the CUDA/HIP execution model", 0, 0,
            {{"warp size", std::to_string(s.warp_size)}, {"schedule", sched}, {"threads", "fibers (Boost.Context)"}}};
  }
  CachingAllocator& allocator(int) override { return allocator_; }
  bool host_accessible() const override { return false; }
  void copy_from_host(void* dst, const void* src, size_t n, int) override {
    host_sync();  // a pageable upload waits for the stream on a GPU
    std::memcpy(dst, src, n);
  }
  void copy_to_host(void* dst, const void* src, size_t n, int) override {
    host_sync();
    std::memcpy(dst, src, n);
  }
  void copy_on_device(void* dst, int, const void* src, int, size_t n) override { std::memcpy(dst, src, n); }
  void synchronize(int) override { host_sync(); }
  // "Pinned" memory is ordinary host memory here, but the loader takes the same path as on a GPU.
  void* allocate_pinned(size_t nbytes) override {
    ++pinned_allocations_;
    return std::aligned_alloc(256, (nbytes + 255) / 256 * 256);
  }
  void free_pinned(void* p) override { std::free(p); }
  void copy_from_host_async(void* dst, const void* src, size_t n, int, Stream&) override { std::memcpy(dst, src, n); }
  std::vector<std::pair<std::string, std::string>> build_info() const override {
    return {{"kernels", std::to_string(kernels_.count()) + "/" + std::to_string(kOpCount) + " ops"},
            {"pinned allocations", std::to_string(pinned_allocations_.load())}};
  }

 private:
  std::atomic<int64_t> pinned_allocations_{0};
  EmulatedMemory memory_;
  CachingAllocator allocator_;
};
}  // namespace

namespace gpu::emulated {
DeviceErrorSlot* device_error_slot(int) {
  g_error_armed = true;
  return &g_error_slot;
}
}  // namespace gpu::emulated

void register_emulated_backend() { register_backend(std::make_unique<EmulatedBackend>()); }

}  // namespace tessera
