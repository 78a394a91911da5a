#pragma once
// Process-level controls: threads, synchronisation and memory statistics.
#include "tessera/backend/allocator.h"
#include "tessera/device.h"

namespace tessera {

/** Worker threads for host-parallel backends (0 = all cores). */
void set_num_threads(int threads);
int num_threads();
/** Waits for all queued work on `device`. */
void synchronize(Device device = kCPU);
/** Allocator statistics of `device`. */
AllocatorStats memory_stats(Device device = kCPU);
/** Caps the bytes `device`'s allocator may reserve (0 = no cap). */
void set_memory_limit(Device device, int64_t bytes);
/** Returns cached blocks of `device`'s allocator to the system. */
void empty_cache(Device device = kCPU);

class Tensor;
class Stream;
/**
 * A contiguous host copy of `host` in page-locked memory of `device`'s backend, for
 * asynchronous uploads; a plain contiguous host tensor when the backend has no pinned memory.
 */
Tensor pin_memory(const Tensor& host, Device device);
/** Uploads a contiguous host tensor to `device`, queued on `stream` (wait on the stream before use). */
Tensor to_device_async(const Tensor& host, Device device, Stream& stream);

/**
 * Makes `stream` the current stream of its device for this thread while the guard lives:
 * kernels, copies and new allocations on that device are queued on it (backends without
 * streams run synchronously and ignore it). Guards nest; the previous stream is restored.
 */
class StreamGuard {
 public:
  explicit StreamGuard(Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
  Stream* previous_;
};

/**
 * Declares that `t`'s memory is used by work on `stream` (other than the stream it was
 * allocated on): when `t` is freed its block is not reused until the device is synchronised.
 */
void record_stream(const Tensor& t, Stream& stream);

}  // namespace tessera
