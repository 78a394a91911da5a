#pragma once
// Per-(device, stream) state of a vendor library (cuBLASLt's handle and 32 MiB workspace), kept
// in one table so it can be released when its stream is destroyed: cached per thread and never
// freed, every short-lived stream (and every graph capture's) left a workspace behind. Host-only
// and vendor-free, so the rules are unit-tested (tests/core/stream_cache_test.cpp).
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

namespace tessera::gpu {

template <class Entry> class StreamCache {
 public:
  /** The entry for `stream` on `device`, filled by make(entry) the first time. `stream_key` is the
   *  allocator's stream tag (per thread for the per-thread default stream, whose handle is the
   *  same value on every thread). The entry stays valid until release_stream(stream_key). */
  template <class Make> Entry& get(int device, const void* stream_key, Make make) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find({device, stream_key});
    if (it == entries_.end()) {
      auto entry = std::make_unique<Entry>();
      make(*entry);  // may throw: nothing is cached then
      it = entries_.emplace(std::make_pair(device, stream_key), std::move(entry)).first;
    }
    return *it->second;
  }
  /** The stream is being destroyed (its work finished): hands each of its entries to release()
   *  and forgets them. */
  template <class Release> void release_stream(const void* stream_key, Release release) {
    std::vector<std::unique_ptr<Entry>> gone;
    {
      std::lock_guard lock(mutex_);
      for (auto it = entries_.begin(); it != entries_.end();) {
        if (it->first.second == stream_key) {
          gone.push_back(std::move(it->second));
          it = entries_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& e : gone) release(*e);  // outside the lock: releasing may wait for the device
  }
  size_t size() const {
    std::lock_guard lock(mutex_);
    return entries_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<int, const void*>, std::unique_ptr<Entry>> entries_;  // pointers stay put while the map changes
};

}  // namespace tessera::gpu
