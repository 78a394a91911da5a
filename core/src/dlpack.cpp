// DLPack export and import (tessera/dlpack.h).
#include "tessera/dlpack.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/backend/registry.h"
#include "tessera/error.h"
#include "tessera/shape.h"
#include "tessera/storage.h"

namespace tessera {
namespace {

// What the capsule owns: the tensor (so its storage lives) and the shape/stride arrays
// DLTensor points into.
struct Exported {
  DLManagedTensor managed{};
  Tensor tensor;
  std::vector<int64_t> shape, strides;
};

DLDataType dl_dtype(DType dt) {
  switch (dt) {
    case DType::f32: return {kDLFloat, 32, 1};
    case DType::f64: return {kDLFloat, 64, 1};
    case DType::f16: return {kDLFloat, 16, 1};
    case DType::bf16: return {kDLBfloat, 16, 1};
    case DType::i8: return {kDLInt, 8, 1};
    case DType::u8: return {kDLUInt, 8, 1};
    case DType::i32: return {kDLInt, 32, 1};
    case DType::i64: return {kDLInt, 64, 1};
    case DType::boolean: return {kDLUInt, 8, 1};
  }
  throw Error("to_dlpack: unknown dtype");
}

DType from_dl_dtype(DLDataType t) {
  TESSERA_CHECK(t.lanes == 1, "from_dlpack", "vector dtypes (lanes ", static_cast<int>(t.lanes), ") are not supported");
  const int code = t.code, bits = t.bits;
  if (code == kDLFloat && bits == 32) return DType::f32;
  if (code == kDLFloat && bits == 64) return DType::f64;
  if (code == kDLFloat && bits == 16) return DType::f16;
  if (code == kDLBfloat && bits == 16) return DType::bf16;
  if (code == kDLInt && bits == 8) return DType::i8;
  if (code == kDLUInt && bits == 8) return DType::u8;
  if (code == kDLInt && bits == 32) return DType::i32;
  if (code == kDLInt && bits == 64) return DType::i64;
  throw Error(detail::concat("from_dlpack: unsupported dtype (code ", code, ", ", bits, " bits)"));
}

DLDevice dl_device(Device d) {
  switch (d.type) {
    case DeviceType::cpu: return {kDLCPU, 0};
    case DeviceType::cuda: return {kDLCUDA, d.index};
    case DeviceType::hip: return {kDLROCM, d.index};
    default: break;
  }
  throw Error(detail::concat("to_dlpack: ", d.str(), " tensors have no DLPack device type; copy to cpu first"));
}

Device from_dl_device(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
    case kDLROCMHost: return kCPU;
    case kDLCUDA: return Device(DeviceType::cuda, d.device_id);
    case kDLROCM: return Device(DeviceType::hip, d.device_id);
    default: break;
  }
  throw Error(detail::concat("from_dlpack: unsupported DLPack device type ", static_cast<int>(d.device_type)));
}

}  // namespace

DLManagedTensor* to_dlpack(const Tensor& t) {
  TESSERA_CHECK(t.defined(), "to_dlpack", "undefined tensor");
  auto e = std::make_unique<Exported>();
  e->tensor = t.detach();
  e->shape.assign(t.shape().begin(), t.shape().end());
  e->strides.assign(t.strides().begin(), t.strides().end());
  DLTensor& d = e->managed.dl_tensor;
  d.data = t.data_ptr();
  d.byte_offset = 0;
  d.device = dl_device(t.device());
  d.dtype = dl_dtype(t.dtype());
  d.ndim = static_cast<int32_t>(t.dim());
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  e->managed.manager_ctx = e.get();
  e->managed.deleter = [](DLManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); };
  return &e.release()->managed;
}

Tensor from_dlpack(DLManagedTensor* managed) {
  TESSERA_CHECK(managed != nullptr, "from_dlpack", "null DLManagedTensor");
  // Until the storage owns it, the capsule is released on any error.
  std::unique_ptr<DLManagedTensor, void (*)(DLManagedTensor*)> guard(managed, [](DLManagedTensor* m) {
    if (m->deleter) m->deleter(m);
  });
  const DLTensor& d = managed->dl_tensor;
  const DType dtype = from_dl_dtype(d.dtype);
  const Device device = from_dl_device(d.device);
  Backend* backend = find_backend(device.type);
  TESSERA_CHECK(backend != nullptr && backend->device_count() > device.index, "from_dlpack", "the tensor is on ", device.str(),
                ", which this build or machine has no device for");
  // The producer is not trusted: every size is checked with the overflow rules the rest of core
  // uses, so a shape or stride that would wrap (a [2^62, 4] shape, a 2^62 stride landing back on
  // element 0) or a null pointer is an error here, not a fault or a silent wrong value later.
  TESSERA_CHECK(d.ndim >= 0 && d.ndim <= 64, "from_dlpack", "ndim must be in [0, 64], got ", d.ndim);
  TESSERA_CHECK(d.ndim == 0 || d.shape != nullptr, "from_dlpack", "null shape pointer with ndim ", d.ndim);
  Shape shape(d.shape, d.shape + d.ndim);
  const int64_t count = checked_numel(shape, "from_dlpack");  // negative sizes, > 2^63 elements
  Strides strides(static_cast<size_t>(d.ndim));
  int64_t span = count > 0 ? 1 : 0, contiguous = 1;  // elements from the first to one past the last
  for (int i = d.ndim - 1; i >= 0; --i) {
    const auto a = static_cast<size_t>(i);
    strides[a] = d.strides ? d.strides[i] : contiguous;  // NULL strides: compact row-major
    if (shape[a] > 0 && __builtin_mul_overflow(contiguous, shape[a], &contiguous)) contiguous = INT64_MAX;  // only strides-less tensors read it
    TESSERA_CHECK(strides[a] >= 0, "from_dlpack", "negative strides are not supported, got ", strides[a], " on axis ", i);
    int64_t reach = 0;
    const bool wraps = span > 0 && (__builtin_mul_overflow(shape[a] - 1, strides[a], &reach) || __builtin_add_overflow(span, reach, &span));
    TESSERA_CHECK(!wraps, "from_dlpack", "shape ", shape_str(shape), " with stride ", strides[a], " on axis ", i,
                  " reaches past 2^63 elements");
  }
  int64_t extent = 0;  // bytes from data + byte_offset to one past the last element
  TESSERA_CHECK(!__builtin_mul_overflow(span, static_cast<int64_t>(itemsize(dtype)), &extent), "from_dlpack", "shape ", shape_str(shape),
                " spans more than 2^63 bytes");
  TESSERA_CHECK(count == 0 || d.data != nullptr, "from_dlpack", "null data pointer for a tensor of shape ", shape_str(shape));
  uintptr_t end = 0;
  TESSERA_CHECK(count == 0 || (!__builtin_add_overflow(reinterpret_cast<uintptr_t>(d.data), d.byte_offset, &end) &&
                               !__builtin_add_overflow(end, static_cast<uintptr_t>(extent), &end)),
                "from_dlpack", "data pointer + byte_offset ", d.byte_offset, " + ", extent, " bytes wraps the address space");
  void* data = static_cast<char*>(d.data) + d.byte_offset;
  const size_t nbytes = static_cast<size_t>(extent);
  auto storage = std::make_shared<Storage>(device, data, nbytes, [m = guard.release()](void*) {
    if (m->deleter) m->deleter(m);
  });
  return detail::make_tensor(std::move(storage), std::move(shape), std::move(strides), 0, dtype);
}

}  // namespace tessera
