#include "tessera/storage.h"

#include "tessera/backend/registry.h"

namespace tessera {

Storage::Storage(Device device, size_t nbytes) : nbytes_(nbytes), device_(device) {
  allocator_ = &backend_for_device(device, "allocate").allocator(device.index);
  data_ = allocator_->allocate(nbytes);
}

Storage::Storage(Device device, void* data, size_t nbytes, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (allocator_) {
    allocator_->deallocate(data_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace tessera
