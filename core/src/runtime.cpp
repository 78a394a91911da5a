// Process-level controls that go through the backend registry.
#include "tessera/runtime.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "tessera/backend/registry.h"
#include "tessera/ops/creation.h"
#include "tessera/tensor.h"

namespace tessera {

void synchronize(Device device) {
  Backend& b = backend_for_device(device, "synchronize");
  b.synchronize(device.index);
  b.allocator(device.index).release_pending();  // nothing is in flight on any stream now
}
AllocatorStats memory_stats(Device device) {
  return backend_for_device(device, "memory_stats").allocator(device.index).stats();
}
void reset_peak_memory(Device device) { backend_for_device(device, "reset_peak_memory").allocator(device.index).reset_peak(); }
void set_memory_limit(Device device, int64_t bytes) {
  backend_for_device(device, "set_memory_limit").allocator(device.index).set_limit(bytes);
}
void inject_allocation_failures(Device device, int64_t count) {
  backend_for_device(device, "inject_allocation_failures").allocator(device.index).inject_raw_failures(count);
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

namespace {
// Free pinned buffers by size, per backend. Never destroyed: buffers may still be returned
// during static destruction, after the backends are gone (the OS reclaims them at exit).
struct PinnedPool {
  Backend* backend;
  std::mutex mutex;
  std::multimap<size_t, void*> free;  // bytes -> buffer
  void* take(size_t bytes) {
    {
      std::lock_guard lock(mutex);
      // The buffer of this size freed last (equal keys keep insertion order): the warmest in
      // cache, and the one a caller that just dropped a buffer gets back.
      if (const auto [lo, hi] = free.equal_range(bytes); lo != hi) {
        const auto it = std::prev(hi);
        void* p = it->second;
        free.erase(it);
        return p;
      }
    }
    return backend->allocate_pinned(bytes);
  }
  void give(size_t bytes, void* p) {
    std::lock_guard lock(mutex);
    free.emplace(bytes, p);
  }
};
PinnedPool& pinned_pool(Backend& b) {
  static std::mutex mutex;
  static auto* pools = new std::map<Backend*, PinnedPool*>();
  std::lock_guard lock(mutex);
  PinnedPool*& pool = (*pools)[&b];
  if (!pool) pool = new PinnedPool{&b, {}, {}};
  return *pool;
}
}  // namespace

Tensor empty_pinned(const Shape& shape, DType dtype, Device device) {
  Backend& b = backend_for_device(device, "empty_pinned");
  const size_t bytes = std::max<size_t>(static_cast<size_t>(checked_nbytes(shape, itemsize(dtype), "empty_pinned")), 1);
  PinnedPool& pool = pinned_pool(b);
  void* p = pool.take(bytes);
  if (!p) return empty(shape, dtype, kCPU);
  auto storage = std::make_shared<Storage>(kCPU, p, bytes, [&pool, bytes](void* q) { pool.give(bytes, q); });
  return detail::make_tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor to_device_async(const Tensor& host, Device device, Stream& stream) {
  TESSERA_CHECK(host.device() == kCPU && host.is_contiguous(), "to_device_async", "expected a contiguous cpu tensor");
  if (device == kCPU) return host;
  Backend& b = backend_for_device(device, "to_device_async");
  Tensor out = empty(host.shape(), host.dtype(), device);
  if (out.nbytes() > 0) b.copy_from_host_async(out.data_ptr(), host.data_ptr(), out.nbytes(), device.index, stream);
  return out;
}

StreamGuard::StreamGuard(Stream& stream) : device_(stream.device()) {
  previous_ = backend_for_device(device_, "StreamGuard").set_current_stream(device_.index, &stream);
}

StreamGuard::~StreamGuard() {
  if (Backend* b = find_backend(device_.type)) b->set_current_stream(device_.index, previous_);
}

void record_current_stream(const Tensor& t) {
  if (!t.defined() || !t.storage() || !t.storage()->data() || t.device() == kCPU) return;
  backend_for_device(t.device(), "record_current_stream").allocator(t.device().index).record_current_stream(t.storage()->data());
}

void record_stream(const Tensor& t, Stream& stream) {
  TESSERA_CHECK(t.device() == stream.device(), "record_stream", "tensor on ", t.device().str(), " but stream on ",
                stream.device().str());
  if (!t.defined() || !t.storage() || !t.storage()->data()) return;
  backend_for_device(t.device(), "record_stream").allocator(t.device().index).record_stream(t.storage()->data(), stream.tag());
}

namespace {
std::atomic<bool>& tf32_flag() {
  static std::atomic<bool> flag = [] {
    const char* e = std::getenv("TESSERA_ALLOW_TF32");
    return e != nullptr && std::strcmp(e, "1") == 0;
  }();
  return flag;
}
}  // namespace

static std::atomic<bool>& fused_flag() {
  static std::atomic<bool> flag = [] {
    const char* e = std::getenv("TESSERA_FUSED");
    return !(e != nullptr && std::strcmp(e, "0") == 0);
  }();
  return flag;
}

void set_allow_tf32(bool allow) { tf32_flag() = allow; }
void set_fused_kernels(bool on) { fused_flag() = on; }
bool fused_kernels() { return fused_flag(); }

static std::atomic<bool>& deterministic_flag() {
  static std::atomic<bool> flag = [] {
    const char* e = std::getenv("TESSERA_DETERMINISTIC");
    return e != nullptr && std::strcmp(e, "1") == 0;
  }();
  return flag;
}
void set_deterministic(bool on) { deterministic_flag() = on; }
bool deterministic() { return deterministic_flag(); }
bool allow_tf32() { return tf32_flag(); }

namespace {
std::mutex g_sync_mutex;
std::map<std::string, int64_t> g_syncs;
thread_local const char* t_current_op = nullptr;
}  // namespace

HostSyncStats host_sync_stats() {
  std::lock_guard lock(g_sync_mutex);
  HostSyncStats s;
  for (const auto& [op, n] : g_syncs) {
    s.total += n;
    s.by_op.emplace_back(op, n);
  }
  return s;
}

void reset_host_sync_stats() {
  std::lock_guard lock(g_sync_mutex);
  g_syncs.clear();
}

namespace detail {
void note_host_sync() {
  std::lock_guard lock(g_sync_mutex);
  ++g_syncs[t_current_op ? t_current_op : "(host)"];
}
OpScope::OpScope(const char* op) : outer_(t_current_op == nullptr) {
  if (outer_) t_current_op = op;
}
OpScope::~OpScope() {
  if (outer_) t_current_op = nullptr;
}
const char* current_op() { return t_current_op; }
}  // namespace detail

}  // namespace tessera
