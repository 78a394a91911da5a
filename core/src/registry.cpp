#include "tessera/backend/registry.h"

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>

#include "tessera/backend/modules.h"
#include "tessera/error.h"
#include "tessera_build_config.h"

namespace tessera {

// Built-in backends: CMake generates the list of register functions (one per compiled
// backend) into tessera_build_config.h as TESSERA_BUILTIN_BACKENDS(X).
#define TESSERA_DECLARE_REGISTER(name) void register_##name##_backend();
TESSERA_BUILTIN_BACKENDS(TESSERA_DECLARE_REGISTER)
#undef TESSERA_DECLARE_REGISTER

namespace {
struct Registry {
  std::mutex mutex;
  // Backends live for the whole process: tensors in static storage may be destroyed after
  // main returns and still need their allocator.
  std::array<Backend*, kNumDeviceTypes> backends{};
  // Backends in modules (TESSERA_MODULES): loaded on the first use of their device type.
  std::array<std::once_flag, kNumDeviceTypes> module_tried;
  std::atomic<bool> all_modules_tried{false};
  std::vector<MissingBackend> module_failures;  // under `mutex`
};

Registry& raw_registry() {
  static Registry* r = new Registry();
  return *r;
}

Registry& registry() {
  static const bool initialised = [] {
#define TESSERA_CALL_REGISTER(name) register_##name##_backend();
    TESSERA_BUILTIN_BACKENDS(TESSERA_CALL_REGISTER)
#undef TESSERA_CALL_REGISTER
    return true;
  }();
  (void)initialised;
  return raw_registry();
}

bool is_module_backend(DeviceType type) {
  const std::string name = device_type_name(type);
  bool found = false;
#define TESSERA_IS_MODULE(n) found = found || name == #n;
  TESSERA_MODULE_BACKENDS(TESSERA_IS_MODULE)
#undef TESSERA_IS_MODULE
  return found;
}

// Loads the module of `type`'s backend once; a failure is kept for missing_backends().
void load_module_backend(DeviceType type) {
  Registry& r = raw_registry();
  if (r.all_modules_tried.load(std::memory_order_acquire)) return;
  std::call_once(r.module_tried[static_cast<size_t>(type)], [&] {
    if (!is_module_backend(type)) return;
    const std::string name = device_type_name(type);
    std::string why;
    auto entry = reinterpret_cast<void (*)()>(modules::symbol(name, "tessera_module_register", &why));
    if (entry) {
      try {
        entry();  // calls register_backend()
        return;
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    std::lock_guard lock(r.mutex);
    r.module_failures.push_back({name, "module " + modules::file_name(name) + ": " + why});
  });
}

void load_all_module_backends() {
  Registry& r = raw_registry();
  if (r.all_modules_tried.load(std::memory_order_acquire)) return;
  for (int t = 0; t < kNumDeviceTypes; ++t) load_module_backend(static_cast<DeviceType>(t));
  r.all_modules_tried.store(true, std::memory_order_release);
}
}  // namespace

void register_backend(std::unique_ptr<Backend> backend) {
  Registry& r = raw_registry();
  std::lock_guard lock(r.mutex);
  auto& slot = r.backends[static_cast<size_t>(backend->device_type())];
  TESSERA_CHECK(slot == nullptr, "register_backend", "a backend for device type ",
                device_type_name(backend->device_type()), " is already registered");
  slot = backend.release();
}

void unregister_backend(DeviceType type) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  delete r.backends[static_cast<size_t>(type)];
  r.backends[static_cast<size_t>(type)] = nullptr;
}

Backend* find_backend(DeviceType type) {
  Registry& r = registry();
  load_module_backend(type);
  std::lock_guard lock(r.mutex);
  return r.backends[static_cast<size_t>(type)];
}

Backend& backend_for(DeviceType type) {
  Backend* b = find_backend(type);
  if (!b) {
    std::string why = "not compiled into this build";
    for (const auto& m : missing_backends()) {
      if (m.name == device_type_name(type)) why = m.reason;
    }
    throw Error(detail::concat("backend: no backend for device type ", device_type_name(type), " (", why, ")"));
  }
  return *b;
}

std::vector<Backend*> registered_backends() {
  Registry& r = registry();
  load_all_module_backends();
  std::lock_guard lock(r.mutex);
  std::vector<Backend*> out;
  for (Backend* b : r.backends) {
    if (b) out.push_back(b);
  }
  return out;
}

Backend& backend_for_device(Device device, const char* op) {
  Backend* b = find_backend(device.type);
  if (!b) {
    backend_for(device.type);  // throws the descriptive error
  }
  const int count = b->device_count();
  if (device.index < 0 || device.index >= count) {
    const std::string why = count == 0 ? b->unavailable_reason() : detail::concat(count, " device(s) present");
    throw Error(detail::concat(op, ": device ", device.str(), " is not available (", why, ")"));
  }
  return *b;
}

std::vector<OpGap> op_gaps(const Backend& backend) {
  std::vector<OpGap> gaps;
  for (int i = 0; i < kOpCount; ++i) {
    const auto op = static_cast<OpId>(i);
    const DTypeSet takes = op_dtypes(op);
    if (!backend.kernels()[op]) {
      gaps.push_back({op, takes, "no kernel"});
      continue;
    }
    const KernelTable::Refusal& r = backend.kernels().refusal(op);
    if (!(r.dtypes & takes).empty()) gaps.push_back({op, r.dtypes & takes, r.why ? r.why : "refused"});
  }
  return gaps;
}

std::vector<MissingBackend> missing_backends() {
  std::vector<MissingBackend> out;
#define TESSERA_MISSING(name, reason) out.push_back({name, reason});
  TESSERA_MISSING_BACKENDS(TESSERA_MISSING)
#undef TESSERA_MISSING
  Registry& r = registry();
  load_all_module_backends();
  std::lock_guard lock(r.mutex);
  out.insert(out.end(), r.module_failures.begin(), r.module_failures.end());
  return out;
}

std::unique_ptr<Stream> Backend::new_stream(int device) {
  struct SyncStream final : Stream {
    Device dev;
    explicit SyncStream(Device d) : dev(d) {}
    Device device() const override { return dev; }
    void synchronize() override {}
  };
  return std::make_unique<SyncStream>(Device(device_type(), device));
}

std::unique_ptr<Event> Backend::new_event(int device) {
  struct HostEvent final : Event {
    Backend* backend;
    int device;
    std::chrono::steady_clock::time_point when{};
    HostEvent(Backend* b, int d) : backend(b), device(d) {}
    void record(Stream& s) override {
      s.synchronize();
      when = std::chrono::steady_clock::now();
    }
    void synchronize() override {}
    double elapsed_ms(const Event& start) const override {
      const auto& s = dynamic_cast<const HostEvent&>(start);
      return std::chrono::duration<double, std::milli>(when - s.when).count();
    }
  };
  return std::make_unique<HostEvent>(this, device);
}

}  // namespace tessera

namespace tessera {
void Backend::begin_capture(int device) {
  throw NotImplemented(detail::concat("graph capture: not supported on ", Device(device_type(), device).str()));
}
std::unique_ptr<GraphExec> Backend::end_capture(int device) {
  throw NotImplemented(detail::concat("graph capture: not supported on ", Device(device_type(), device).str()));
}
}  // namespace tessera
