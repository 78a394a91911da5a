#include "tessera/storage.h"

#include "tessera/backend/registry.h"
#include "tessera/error.h"

namespace tessera {

Storage::Storage(Device device, size_t nbytes) : nbytes_(nbytes), device_(device) {
  allocator_ = &backend_for_device(device, "allocate").allocator(device.index);
  data_ = allocator_->allocate(nbytes);
}

Storage::Storage(Device device, void* data, size_t nbytes, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (released_) return;
  if (allocator_) {
    allocator_->deallocate(data_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

void Storage::release() {
  TESSERA_CHECK(allocator_ != nullptr, "Storage::release",
                "only storage allocated by Tessera can be released (this one wraps memory owned elsewhere, on ", device_.str(), ")");
  if (released_) return;
  allocator_->deallocate(data_);
  data_ = nullptr;
  released_ = true;
}

void Storage::materialize() {
  if (!released_) return;
  data_ = allocator_->allocate(nbytes_);
  released_ = false;
}

}  // namespace tessera
