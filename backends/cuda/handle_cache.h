#pragma once
// Vendor-library handles cached per (device, stream) for each host thread. cuBLAS, cuBLASLt and
// cuDNN handles must not be re-pointed at another stream while another thread uses them, so
// each thread owns its handles and each handle keeps the stream it was created for: no
// Set*Stream race, and no handle creation (hundreds of microseconds) per call. Handles live
// until the process exits (destroying them during static destruction races the CUDA runtime's
// own teardown, as PyTorch also found).
#include <cuda_runtime.h>

#include <map>
#include <utility>

#include "tessera/error.h"

namespace tessera::cuda_libs {

/** Throws when cudaSetDevice fails; vendor handles are created for the current device. */
inline void set_device(int device, const char* lib) {
  if (cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(detail::concat(lib, ": cudaSetDevice(", device, ") failed"));
  }
}

/** Restores the calling thread's current device when it goes out of scope. */
class DeviceGuard {
 public:
  DeviceGuard(int device, const char* lib) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) set_device(device, lib);
  }
  ~DeviceGuard() {
    int now = -1;
    if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

/**
 * The calling thread's handle (plus per-handle state such as a workspace) for `device` and
 * `stream`; `make(device, stream)` creates one the first time.
 */
template <class Entry, class Make> Entry& cached_handle(int device, cudaStream_t stream, Make make) {
  thread_local std::map<std::pair<int, cudaStream_t>, Entry> entries;
  auto it = entries.find({device, stream});
  if (it == entries.end()) {
    DeviceGuard guard(device, "handle cache");
    it = entries.emplace(std::make_pair(device, stream), make(device, stream)).first;
  }
  return it->second;
}

}  // namespace tessera::cuda_libs
