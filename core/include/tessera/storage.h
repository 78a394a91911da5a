#pragma once
// Ref-counted device memory shared by a tensor and all of its views.
#include <cstddef>
#include <functional>
#include <memory>

#include "tessera/device.h"

namespace tessera {

class CachingAllocator;

class Storage {
 public:
  /** Allocates `nbytes` on `device` through its backend's caching allocator. */
  Storage(Device device, size_t nbytes);
  /** Wraps memory owned elsewhere; `deleter` (may be empty) runs when the storage dies. */
  Storage(Device device, void* data, size_t nbytes, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  /**
   * Gives the memory back to the allocator while every tensor viewing this storage stays valid
   * as an object (fully sharded training frees a layer's gathered parameters between its forward
   * and its backward, under the tensors autograd saved). Reading a released storage throws;
   * materialize() allocates it again (contents undefined until written). Only storages this
   * library allocated can be released.
   */
  void release();
  void materialize();
  bool released() const { return released_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  CachingAllocator* allocator_ = nullptr;
  std::function<void(void*)> deleter_;
  bool released_ = false;
};

}  // namespace tessera
