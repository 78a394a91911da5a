#include "batch_upload.h"

#include <cstring>

#include "tessera/backend/registry.h"
#include "tessera/ops/creation.h"
#include "tessera/runtime.h"

namespace tessera::nn::detail {

BatchUploader::BatchUploader(Device device) : device_(device), backend_(backend_for_device(device, "DataLoader")) {}

BatchUploader::~BatchUploader() = default;

// A contiguous copy of `host` in a pooled pinned buffer (pageable memory when the backend has none).
Tensor BatchUploader::pinned_copy(const Tensor& host) {
  const Tensor src = host.contiguous();
  Tensor pinned = empty_pinned(src.shape(), src.dtype(), device_);
  if (src.nbytes() > 0) std::memcpy(pinned.data_ptr(), src.data_ptr(), src.nbytes());
  return pinned;
}

std::vector<Tensor> BatchUploader::upload(const std::vector<Tensor>& host, const std::function<void(std::vector<Tensor>&)>& on_device) {
  std::lock_guard lock(mutex_);
  if (!stream_) stream_ = backend_.new_stream(device_.index);
  std::vector<Tensor> pinned, out;
  for (const Tensor& h : host) pinned.push_back(pinned_copy(h));
  {
    StreamGuard guard(*stream_);  // the device tensors are allocated on the copy stream
    for (const Tensor& p : pinned) out.push_back(to_device_async(p, device_, *stream_));
    if (on_device) on_device(out);
  }
  stream_->synchronize();  // this worker waits for its copies; then the pinned buffers return to the pool
  return out;
}

}  // namespace tessera::nn::detail
