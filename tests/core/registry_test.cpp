// Plugging a backend in through the SPI alone: a stub backend (host memory, empty kernel
// table) registered at run time exercises device checks, cross-device copies and the
// "not implemented" error without touching the core.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "support/checks.h"

using namespace tessera;

namespace {
class StubMemory final : public RawAllocator {
 public:
  void* raw_alloc(size_t n) override { return std::malloc(n); }
  void raw_free(void* p) override { std::free(p); }
  bool host_accessible() const override { return true; }
};

class StubBackend final : public Backend {
 public:
  explicit StubBackend(DeviceType type) : type_(type), allocator_("stub:0", memory_) {}
  const char* name() const override { return "stub"; }
  DeviceType device_type() const override { return type_; }
  int device_count() const override { return 1; }
  DeviceInfo device_info(int) const override { return {"stub device", 1 << 20, 1, {}}; }
  CachingAllocator& allocator(int) override { return allocator_; }
  // Pretend to be a discrete device so every copy goes through the SPI copy calls.
  bool host_accessible() const override { return false; }
  void copy_from_host(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n), ++copies; }
  void copy_to_host(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n), ++copies; }
  void copy_on_device(void* dst, int, const void* src, int, size_t n) override { std::memcpy(dst, src, n), ++copies; }
  void synchronize(int) override {}
  int copies = 0;

 private:
  DeviceType type_;
  StubMemory memory_;
  CachingAllocator allocator_;
};

DeviceType free_device_type() {
  for (DeviceType t : {DeviceType::emulated, DeviceType::kokkos, DeviceType::hip, DeviceType::cuda}) {
    if (!find_backend(t)) return t;
  }
  return DeviceType::cpu;
}
}  // namespace

TEST_CASE("a backend registered at run time gets device checks, copies and clear errors") {
  const DeviceType type = free_device_type();
  if (type == DeviceType::cpu) {
    MESSAGE("every device type has a backend in this build; the stub test needs a free one");
    return;
  }
  auto owned = std::make_unique<StubBackend>(type);
  StubBackend* stub = owned.get();
  register_backend(std::move(owned));
  const Device dev(type, 0);
  {
    const Tensor host = from_vector<float>({1, 2, 3}, {3});
    const Tensor remote = host.to(dev);
    CHECK(remote.device() == dev);
    CHECK(stub->copies == 1);
    CHECK(remote.to(kCPU).to_vector<float>() == std::vector<float>{1, 2, 3});
    TESSERA_CHECK_THROWS_WITH(add(host, remote), "add: expected all tensors on one device, got cpu:0 and ");
    CHECK_THROWS_WITH_AS(exp(remote), doctest::Contains("exp: not implemented on stub"), NotImplemented);
    CHECK_THROWS_WITH_AS(remote.clone(), doctest::Contains("copy: not implemented on stub"), NotImplemented);
    TESSERA_CHECK_THROWS_WITH(zeros({1}, DType::f32, Device(type, 1)), "is not available (1 device(s) present)");
    CHECK_THROWS_AS(register_backend(std::make_unique<StubBackend>(type)), Error);
    CHECK(memory_stats(dev).in_use_bytes > 0);
  }
  CHECK(memory_stats(dev).in_use_bytes == 0);
  unregister_backend(type);
  CHECK(find_backend(type) == nullptr);
  TESSERA_CHECK_THROWS_WITH(zeros({1}, DType::f32, dev), "backend: no backend for device type");
}

TEST_CASE("the CPU backend fills every entry of the op list") {
  const Backend& cpu = backend_for(DeviceType::cpu);
  for (int i = 0; i < kOpCount; ++i) {
    CAPTURE(op_name(static_cast<OpId>(i)));
    CHECK(static_cast<bool>(cpu.kernels()[static_cast<OpId>(i)]));
  }
  CHECK(cpu.device_info(0).compute_units >= 1);
  CHECK(missing_backends().size() + registered_backends().size() >= 5);
}

TEST_CASE("streams and events on the CPU backend run synchronously and time in order") {
  Backend& cpu = backend_for(DeviceType::cpu);
  auto stream = cpu.new_stream(0);
  CHECK(stream->device() == kCPU);
  auto start = cpu.new_event(0), stop = cpu.new_event(0);
  start->record(*stream);
  const Tensor big = ones({1 << 20});
  CHECK(sum(big).item<double>() == static_cast<double>(1 << 20));
  stop->record(*stream);
  stop->synchronize();
  stream->synchronize();
  CHECK(stop->elapsed_ms(*start) >= 0.0);
  synchronize(kCPU);
}

TEST_CASE("the CPU fallback runs an op a backend lacks on the cpu, and only when asked") {
  Backend* emu = find_backend(DeviceType::emulated);
  if (!emu || emu->device_count() == 0) {
    MESSAGE("no emulated backend in this build: the fallback needs a non-cpu backend to lack an op");
    return;
  }
  const Device dev(DeviceType::emulated, 0);
  const Tensor x = from_vector<float>({0, 1, 2}, {3}).to(dev);
  const KernelFn exp_kernel = emu->replace_kernel(OpId::Exp, nullptr);  // a backend without exp
  CHECK_THROWS_WITH_AS(exp(x), doctest::Contains("exp: not implemented on emulated (TESSERA_CPU_FALLBACK=1 runs it on the cpu)"),
                       NotImplemented);
  set_cpu_fallback(true);
  const int64_t before = cpu_fallback_count();
  const Tensor y = exp(x);
  CHECK(y.device() == dev);
  const auto v = y.to(kCPU).to_vector<float>();
  CHECK(v[0] == 1.0f);
  CHECK(v[2] == doctest::Approx(std::exp(2.0)).epsilon(1e-6));
  CHECK(cpu_fallback_count() == before + 1);
  // Into a view of a device tensor: the result lands in place.
  Tensor z = zeros({2, 3}, DType::f32, dev);
  Tensor row = z.select(0, 1);
  row.copy_(exp(x));
  CHECK(z.to(kCPU).to_vector<float>()[4] == doctest::Approx(std::exp(1.0)).epsilon(1e-6));
  set_cpu_fallback(false);
  emu->replace_kernel(OpId::Exp, exp_kernel);
  CHECK(exp(x).to(kCPU).to_vector<float>() == v);
}
