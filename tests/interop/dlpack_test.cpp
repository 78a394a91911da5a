// DLPack: tensors leave and enter Tessera without a copy, deleters run exactly once, and
// unsupported inputs are refused (taking ownership all the same). With libtorch
// (TESSERA_TEST_TORCH): tensors go to PyTorch's at::fromDLPack and come back from at::toDLPack,
// and a write through either side is seen by the other: the same memory.
#if defined(TESSERA_TEST_TORCH)
// First: libtorch pulls in glog, whose CHECK macros would replace doctest's.
#include <ATen/DLConvertor.h>
#include <torch/torch.h>
#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#endif

#include <doctest/doctest.h>

#include "support/checks.h"
#include "tessera/dlpack.h"
#include "tessera/tessera.h"

using namespace tessera;

TEST_CASE("to_dlpack and from_dlpack share memory and release it once") {
  Tensor t = arange(0.0, 12.0, 1.0, DType::f32, kCPU).reshape({3, 4});
  Tensor view = t.mT();  // strides (1, 4): exported as they are
  DLManagedTensor* m = to_dlpack(view);
  CHECK(m->dl_tensor.data == view.data_ptr());
  CHECK(m->dl_tensor.ndim == 2);
  CHECK(m->dl_tensor.shape[0] == 4);
  CHECK(m->dl_tensor.strides[0] == 1);
  CHECK(m->dl_tensor.strides[1] == 4);
  CHECK(m->dl_tensor.device.device_type == kDLCPU);
  CHECK(m->dl_tensor.dtype.code == kDLFloat);
  Tensor back = from_dlpack(m);  // owns the capsule now
  CHECK(back.data_ptr() == t.data_ptr());
  CHECK(back.shape() == Shape{4, 3});
  CHECK(back.strides() == Strides{1, 4});
  t.fill_(7.0);  // a write through the original is seen through the import
  CHECK(back.to_vector<float>() == std::vector<float>(12, 7.0f));

  // The deleter runs when the last tensor on the import dies, once.
  static int deleted = 0;
  deleted = 0;
  static float buffer[6] = {1, 2, 3, 4, 5, 6};
  static int64_t shape[1] = {6};
  auto* raw = new DLManagedTensor{};
  raw->dl_tensor = DLTensor{buffer, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, nullptr, 0};
  raw->deleter = [](DLManagedTensor* self) {
    ++deleted;
    delete self;
  };
  {
    Tensor a = from_dlpack(raw);
    Tensor b = a.slice(0, 2, 5);
    a = Tensor();
    CHECK(deleted == 0);
    CHECK(b.to_vector<float>() == std::vector<float>{3, 4, 5});
  }
  CHECK(deleted == 1);

  // Refused imports still release the capsule.
  auto* bad = new DLManagedTensor{};
  bad->dl_tensor = DLTensor{buffer, {kDLCPU, 0}, 1, {kDLComplex, 64, 1}, shape, nullptr, 0};
  bad->deleter = [](DLManagedTensor* self) {
    ++deleted;
    delete self;
  };
  TESSERA_CHECK_THROWS_WITH(from_dlpack(bad), "from_dlpack: unsupported dtype (code 5, 64 bits)");
  CHECK(deleted == 2);
  if (find_backend(DeviceType::emulated) && find_backend(DeviceType::emulated)->device_count() > 0) {
    TESSERA_CHECK_THROWS_WITH(to_dlpack(zeros({2}, DType::f32, Device(DeviceType::emulated, 0))),
                              "to_dlpack: emulated:0 tensors have no DLPack device type");
  }
}

#if defined(TESSERA_TEST_TORCH)
TEST_CASE("tensors cross to libtorch and back without a copy") {
  // Tessera -> PyTorch: at::fromDLPack views Tessera's memory.
  Tensor t = arange(0.0, 6.0, 1.0, DType::f32, kCPU).reshape({2, 3});
  at::Tensor pt = at::fromDLPack(to_dlpack(t));
  CHECK(pt.data_ptr() == t.data_ptr());
  pt.mul_(10);  // written by PyTorch, read by Tessera
  CHECK(t.to_vector<float>() == std::vector<float>{0, 10, 20, 30, 40, 50});
  t.add_(1.0);  // written by Tessera, read by PyTorch
  CHECK(pt.sum().item<float>() == doctest::Approx(156.0));

  // PyTorch -> Tessera: from_dlpack views PyTorch's memory, a transposed view included.
  at::Tensor src = torch::arange(12, torch::kInt64).reshape({3, 4}).t();
  Tensor back = from_dlpack(at::toDLPack(src));
  CHECK(back.data_ptr() == src.data_ptr());
  CHECK(back.shape() == Shape{4, 3});
  CHECK(back.dtype() == DType::i64);
  CHECK(back.strides() == Strides{1, 4});
  src.add_(100);
  CHECK(sum(back).item<int64_t>() == 66 + 1200);
  // bf16 and f16 keep their bits both ways.
  Tensor h = full({4}, 1.5, DType::bf16, kCPU);
  at::Tensor ph = at::fromDLPack(to_dlpack(h));
  CHECK((ph.scalar_type() == at::kBFloat16));
  CHECK(ph.to(at::kFloat).sum().item<float>() == 6.0f);
}
#endif

namespace {
// A capsule over `buffer` with the given shape and strides; counts its deleter's calls.
struct Probe {
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
  int deleted = 0;
  Probe(void* data, std::vector<int64_t> s, std::vector<int64_t> st, bool null_shape = false) : shape(std::move(s)), strides(std::move(st)) {
    DLTensor& d = managed.dl_tensor;
    d.data = data;
    d.device = {kDLCPU, 0};
    d.dtype = {kDLFloat, 32, 1};
    d.ndim = static_cast<int32_t>(shape.size());
    d.shape = null_shape ? nullptr : shape.data();
    d.strides = strides.empty() ? nullptr : strides.data();
    managed.manager_ctx = this;
    managed.deleter = [](DLManagedTensor* m) { ++static_cast<Probe*>(m->manager_ctx)->deleted; };
  }
};

std::string import_error(Probe& p) {
  try {
    (void)from_dlpack(&p.managed);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}
}  // namespace

// A held-out probe found from_dlpack trusting the producer: these shapes, strides and pointers
// were accepted and then faulted or read wrong values. Each is refused, and the capsule is
// released exactly once all the same.
TEST_CASE("from_dlpack refuses shapes, strides and pointers that would wrap or fault") {
  float buffer[16] = {};
  const int64_t big = int64_t{1} << 62;
  Probe huge(buffer, {big, 4}, {});
  const std::string huge_err = import_error(huge);
  CHECK(huge_err.find("from_dlpack: ") == 0);
  CHECK(huge_err.find("has more than 2^63 elements") != std::string::npos);
  CHECK(huge.deleted == 1);
  Probe wrapping_stride(buffer, {2, 4}, {big, 1});
  CHECK(import_error(wrapping_stride).find("spans more than 2^63 bytes") != std::string::npos);
  Probe wrapping_reach(buffer, {5, 4}, {big, 1});
  CHECK(import_error(wrapping_reach).find("reaches past 2^63 elements") != std::string::npos);
  Probe null_shape(buffer, {2, 2}, {}, true);
  CHECK(import_error(null_shape).find("from_dlpack: null shape pointer") == 0);
  Probe null_data(nullptr, {2, 2}, {});
  CHECK(import_error(null_data).find("from_dlpack: null data pointer") == 0);
  Probe negative(buffer, {-2, 2}, {});
  CHECK(import_error(negative).find("negative size") != std::string::npos);
  Probe at_top(reinterpret_cast<void*>(~uintptr_t{0} - 8), {4}, {});
  CHECK(import_error(at_top).find("wraps the address space") != std::string::npos);
  for (Probe* p : {&wrapping_stride, &wrapping_reach, &null_shape, &null_data, &negative, &at_top}) CHECK(p->deleted == 1);
  // An empty tensor may have a null data pointer; a valid strided view still imports.
  Probe none(nullptr, {0, 3}, {});
  CHECK(from_dlpack(&none.managed).numel() == 0);
  for (int i = 0; i < 16; ++i) buffer[i] = static_cast<float>(i);
  Probe ok(buffer, {2, 3}, {8, 2});
  const Tensor t = from_dlpack(&ok.managed);
  CHECK(t.to_vector<float>() == std::vector<float>{0, 2, 4, 8, 10, 12});
}
