#pragma once
// Which streams launched a checking kernel (device_errors.h) since a device's error slot was
// last read. A host sync that waited for one stream may read the slot only for that stream's
// kernels: another stream's checking kernel may not have run yet, and clearing a single
// device-wide "armed" flag there would lose its report for good. Host-only, vendor-free, so
// the decision is unit-tested (tests/core/error_arming_test.cpp) and shared by every backend.
#include <algorithm>
#include <mutex>
#include <vector>

namespace tessera::gpu {

class ArmedStreams {
 public:
  /** What take() gets after a device-wide synchronisation. */
  static const void* whole_device() {
    static const char tag = 0;
    return &tag;
  }
  /** A checking kernel was queued on `stream` (the allocator's stream tag). */
  void arm(const void* stream) {
    std::lock_guard lock(mutex_);
    if (std::find(streams_.begin(), streams_.end(), stream) == streams_.end()) streams_.push_back(stream);
  }
  /** The host waited for `synced` (or whole_device()): true when the slot is to be read now, and
   *  the streams whose kernels that covers are disarmed; the others stay armed. */
  bool take(const void* synced) {
    std::lock_guard lock(mutex_);
    if (synced == whole_device()) {
      const bool any = !streams_.empty();
      streams_.clear();
      return any;
    }
    auto it = std::find(streams_.begin(), streams_.end(), synced);
    if (it == streams_.end()) return false;
    streams_.erase(it);
    return true;
  }
  bool armed() const {
    std::lock_guard lock(mutex_);
    return !streams_.empty();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<const void*> streams_;
};

}  // namespace tessera::gpu
