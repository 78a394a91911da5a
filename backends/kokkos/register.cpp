// The Kokkos backend: device type `kokkos`, memory in the default execution space's memory
// space (kokkos_malloc behind the caching allocator), copies by deep_copy, kernels from this
// directory. The backend owns Kokkos::initialize/finalize unless the application already
// initialised Kokkos itself, in which case it leaves both to the application.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "common.h"
#include "linalg_blas.h"
#include "tessera/backend/registry.h"
#include "tessera/runtime.h"

namespace tessera {
namespace kokkos {
namespace {

using HostBytes = Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
using DeviceBytes = Kokkos::View<char*, Mem, Kokkos::MemoryUnmanaged>;
constexpr bool kHostAccessible = Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible;

class KokkosMemory final : public RawAllocator {
 public:
  void* raw_alloc(size_t nbytes) override {
    try {
      return Kokkos::kokkos_malloc<Mem>("tessera", nbytes == 0 ? 1 : nbytes);
    } catch (const std::exception&) {
      return nullptr;  // the caching allocator releases its cache, retries, then throws OutOfMemory
    }
  }
  void raw_free(void* p) override {
    if (Kokkos::is_initialized()) Kokkos::kokkos_free<Mem>(p);  // tensors may outlive finalize at exit
  }
  bool host_accessible() const override { return kHostAccessible; }
};

class KokkosBackend final : public Backend {
 public:
  KokkosBackend() {
    if (!Kokkos::is_initialized()) {
      int argc = 1;
      char name[] = "tessera";
      char* argv[] = {name, nullptr};
      Kokkos::initialize(argc, argv);
      owns_kokkos_ = true;
    }
    allocator_ = std::make_unique<CachingAllocator>("kokkos:0", memory_);
    if (const char* g = std::getenv("TESSERA_ALLOC_GUARD"); g && std::strcmp(g, "0") != 0 && kHostAccessible) allocator_->set_guards(true);
    register_elementwise(kernels_);
    register_reductions(kernels_);
    register_linalg(kernels_);
    register_nn(kernels_);
    register_attention(kernels_);
  }
  ~KokkosBackend() override {
    allocator_.reset();  // returns cached blocks while Kokkos is still up
    if (owns_kokkos_ && Kokkos::is_initialized()) Kokkos::finalize();
  }
  const char* name() const override { return "kokkos"; }
  DeviceType device_type() const override { return DeviceType::kokkos; }
  int device_count() const override { return 1; }
  DeviceInfo device_info(int) const override {
    return {std::string("Kokkos ") + Exec::name(), 0, Exec().concurrency(),
            {{"execution space", Exec::name()}, {"memory space", Mem::name()}, {"kokkos version", version()},
             {"team size", kokkos::forced_team_size() > 0 ? std::to_string(kokkos::forced_team_size()) + " (TESSERA_KOKKOS_TEAM_SIZE)" : "auto"}}};
  }
  std::vector<std::pair<std::string, std::string>> build_info() const override {
    return {{"kokkos version", version()},
            {"execution space", Exec::name()},
            {"kernels", std::to_string(kernels_.count()) + "/" + std::to_string(kOpCount) + " ops"},
            {"gemm", kokkos::blas_description()}};
  }
  std::vector<NondeterministicOp> nondeterministic_ops() const override { return kokkos::blas_nondeterministic_ops(); }
  CachingAllocator& allocator(int) override { return *allocator_; }
  bool host_accessible() const override { return kHostAccessible; }
  // Each deep_copy and fence waits for the execution space: counted as the GPU backends count
  // their host syncs (a training step should have one, reading the loss).
  void copy_from_host(void* dst, const void* src, size_t n, int) override {
    detail::note_host_sync();
    Kokkos::deep_copy(DeviceBytes(static_cast<char*>(dst), n), HostBytes(static_cast<char*>(const_cast<void*>(src)), n));
  }
  void copy_to_host(void* dst, const void* src, size_t n, int) override {
    detail::note_host_sync();
    Kokkos::deep_copy(HostBytes(static_cast<char*>(dst), n), DeviceBytes(static_cast<char*>(const_cast<void*>(src)), n));
  }
  void copy_on_device(void* dst, int, const void* src, int, size_t n) override {
    Kokkos::deep_copy(DeviceBytes(static_cast<char*>(dst), n), DeviceBytes(static_cast<char*>(const_cast<void*>(src)), n));
  }
  void synchronize(int) override {
    detail::note_host_sync();
    Kokkos::fence();
  }

 private:
  static std::string version() {
    const int v = KOKKOS_VERSION;  // e.g. 30401 or 40200
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  }
  bool owns_kokkos_ = false;
  KokkosMemory memory_;
  std::unique_ptr<CachingAllocator> allocator_;
};
}  // namespace
}  // namespace kokkos

void register_kokkos_backend() { register_backend(std::make_unique<kokkos::KokkosBackend>()); }

}  // namespace tessera
