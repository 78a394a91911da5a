#include "batch_upload.h"

#include <cstring>

#include "tessera/backend/registry.h"
#include "tessera/ops/creation.h"
#include "tessera/runtime.h"

namespace tessera::nn::detail {

struct BatchUploader::Pool {
  Backend* backend;
  std::mutex mutex;
  std::multimap<size_t, void*> free;  // bytes -> buffer
  ~Pool() {
    for (auto& [bytes, p] : free) backend->free_pinned(p);
  }
  void* take(size_t bytes) {
    {
      std::lock_guard lock(mutex);
      if (auto it = free.find(bytes); it != free.end()) {
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

BatchUploader::BatchUploader(Device device)
    : device_(device), backend_(backend_for_device(device, "DataLoader")), pool_(std::make_shared<Pool>()) {
  pool_->backend = &backend_;
}

BatchUploader::~BatchUploader() = default;

// A contiguous copy of `host` in a pooled pinned buffer (pageable memory when the backend has none).
Tensor BatchUploader::pinned_copy(const Tensor& host) {
  const Tensor src = host.contiguous();
  const size_t bytes = std::max<size_t>(src.nbytes(), 1);
  void* p = pool_->take(bytes);
  if (!p) return src;
  std::memcpy(p, src.data_ptr(), src.nbytes());
  std::shared_ptr<Pool> pool = pool_;
  auto storage = std::make_shared<Storage>(kCPU, p, bytes, [pool, bytes](void* q) { pool->give(bytes, q); });
  return tessera::detail::make_tensor(std::move(storage), src.shape(), contiguous_strides(src.shape()), 0, src.dtype());
}

std::vector<Tensor> BatchUploader::upload(const std::vector<Tensor>& host) {
  std::lock_guard lock(mutex_);
  if (!stream_) stream_ = backend_.new_stream(device_.index);
  std::vector<Tensor> pinned, out;
  for (const Tensor& h : host) pinned.push_back(pinned_copy(h));
  {
    StreamGuard guard(*stream_);  // the device tensors are allocated on the copy stream
    for (const Tensor& p : pinned) out.push_back(to_device_async(p, device_, *stream_));
  }
  stream_->synchronize();  // this worker waits for its copies; then the pinned buffers return to the pool
  return out;
}

}  // namespace tessera::nn::detail
