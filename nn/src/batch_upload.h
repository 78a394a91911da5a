#pragma once
// How the DataLoader moves batches to a device backend: through pinned host buffers taken from
// the process-wide pool (empty_pinned) and one copy stream for the whole loader, so an upload overlaps the training step
// running on the caller's stream. The worker thread waits for its own copy; the device tensors
// belong to the copy stream, and the consumer records its use of them (record_current_stream)
// so their blocks are not reused for the next upload while its kernels may still read them.
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "tessera/backend/backend.h"
#include "tessera/tensor.h"

namespace tessera::nn::detail {

class BatchUploader {
 public:
  explicit BatchUploader(Device device);
  ~BatchUploader();
  BatchUploader(const BatchUploader&) = delete;
  BatchUploader& operator=(const BatchUploader&) = delete;

  /** Device copies of the contiguous-ized host tensors, complete when this returns; `on_device`
   *  (when given) runs on the copy stream after the copies and may replace the tensors. */
  std::vector<Tensor> upload(const std::vector<Tensor>& host, const std::function<void(std::vector<Tensor>&)>& on_device = {});

 private:
  Tensor pinned_copy(const Tensor& host);

  Device device_;
  Backend& backend_;
  std::mutex mutex_;  // one upload at a time on the one copy stream
  std::unique_ptr<Stream> stream_;
};

}  // namespace tessera::nn::detail
