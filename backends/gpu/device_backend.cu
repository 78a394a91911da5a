// The CUDA and HIP backends' runtime side, written once over gpu::vendor (runtime.h): device
// probing (no device or no driver gives zero devices and the reason), a stream-aware caching
// allocator per device over the vendor malloc (on OOM the cache is released and the call
// retried once, then tessera::OutOfMemory carries the stats), per-thread current streams
// (StreamGuard), copies ordered on the current stream including peer copies, and the kernel
// table of this source tree.
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"
#include "error_arming.h"
#include "kernels.h"
#include "tessera/backend/annotator.h"
#include "tessera/backend/backend.h"
#include "tessera/runtime.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {
namespace {

// Makes `device` current for a scope and restores the caller's device after it.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    TESSERA_GPU_CHECK(vendor::get_device(&previous_));
    if (previous_ != device) TESSERA_GPU_CHECK(vendor::set_device(device));
  }
  ~DeviceScope() { (void)vendor::set_device(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

// Process groups (NCCL/RCCL) wait for their outstanding collectives under the collective deadline
// before anything waits on the whole device: a collective whose peer never arrives would make
// cudaDeviceSynchronize or cudaFree block forever.
struct DeviceSyncHooks {
  std::mutex mutex;
  std::vector<void (*)(int)> hooks;
  std::atomic<bool> any{false};
};
DeviceSyncHooks& device_sync_hooks() {
  static auto* h = new DeviceSyncHooks;
  return *h;
}
// Vendor libraries make their handles for a capture stream before the capture begins.
struct CapturePrepareHooks {
  std::mutex mutex;
  std::vector<void (*)(int)> hooks;
};
CapturePrepareHooks& capture_prepare_hooks() {
  static auto* h = new CapturePrepareHooks;
  return *h;
}
void run_capture_prepare_hooks(int device) {
  std::vector<void (*)(int)> hooks;
  {
    std::lock_guard lock(capture_prepare_hooks().mutex);
    hooks = capture_prepare_hooks().hooks;
  }
  for (auto* hook : hooks) hook(device);
}
void before_device_sync(int device) {
  if (!device_sync_hooks().any.load(std::memory_order_acquire)) return;
  std::vector<void (*)(int)> hooks;
  {
    std::lock_guard lock(device_sync_hooks().mutex);
    hooks = device_sync_hooks().hooks;
  }
  for (auto* hook : hooks) hook(device);
}

class DeviceMemory final : public RawAllocator {
 public:
  explicit DeviceMemory(int device) : device_(device) {}
  void* raw_alloc(size_t nbytes) override {
    const DeviceScope scope(device_);  // the allocation lands on this allocator's device
    void* p = nullptr;
    const VendorError e = vendor::allocate(&p, nbytes);
    if (!ok(e)) {
      (void)last_error();  // clear the sticky error: the caching allocator retries or throws
      // Only a lack of memory is OutOfMemory; anything else (a capture it broke, a lost device)
      // is reported as what it is, not as "out of memory allocating 128 B".
      if (!vendor::out_of_memory(e)) {
        throw Error(detail::concat("allocate: ", kVendorDevice, ":", device_, ": ", error_text(e), " (", nbytes, " B)"));
      }
      return nullptr;
    }
    return p;
  }
  void raw_free(void* p) override {
    before_device_sync(device_);  // cudaFree waits for the device
    const DeviceScope scope(device_);
    (void)vendor::release(p);
  }
  bool host_accessible() const override { return false; }

 private:
  int device_;
};

// A vendor stream: current for a thread under a StreamGuard, or used for explicit async copies.
class VendorStream final : public Stream {
 public:
  explicit VendorStream(Device device) : device_(device) {
    const DeviceScope scope(device.index);
    TESSERA_GPU_CHECK(vendor::stream_create(&stream_));
  }
  ~VendorStream() override;
  Device device() const override { return device_; }
  void synchronize() override;
  const void* tag() const override { return stream_; }
  void wait(Event& event) override;
  vendor::StreamHandle handle() const { return stream_; }

 private:
  Device device_;
  vendor::StreamHandle stream_{};
};

class VendorEvent final : public Event {
 public:
  explicit VendorEvent(int device) {
    const DeviceScope scope(device);
    TESSERA_GPU_CHECK(vendor::event_create(&event_));
  }
  ~VendorEvent() override { (void)vendor::event_destroy(event_); }
  void record(Stream& s) override {
    auto* vs = dynamic_cast<VendorStream*>(&s);
    TESSERA_GPU_CHECK(vendor::event_record(event_, vs ? vs->handle() : vendor::current_stream()));
  }
  void synchronize() override { TESSERA_GPU_CHECK(vendor::event_synchronize(event_)); }
  vendor::EventHandle handle() const { return event_; }
  double elapsed_ms(const Event& start) const override {
    const auto& s = dynamic_cast<const VendorEvent&>(start);
    float ms = 0;
    TESSERA_GPU_CHECK(vendor::event_elapsed(&ms, s.event_, event_));
    return ms;
  }

 private:
  vendor::EventHandle event_{};
};

// What the caching allocator files a block under: the stream handle, except for the per-thread
// default stream, whose handle is the same value on every thread although each thread's is a
// different queue: there the tag is per thread, so a block freed by one thread's default-stream
// work is reused only by that thread's (stream-ordered) work. Every thread's tag is remembered,
// so an event is never recorded into another thread's default stream by mistake.
struct DefaultStreamTags {
  std::mutex mutex;
  std::vector<const void*> tags;
};
DefaultStreamTags& default_stream_tags() {
  static auto* t = new DefaultStreamTags;  // never destroyed: threads may end during static teardown
  return *t;
}
const void* own_default_tag() {
  thread_local const char tag = 0;
  thread_local const bool registered = [] {
    std::lock_guard lock(default_stream_tags().mutex);
    default_stream_tags().tags.push_back(&tag);
    return true;
  }();
  (void)registered;
  return &tag;
}
bool is_default_stream_tag(const void* tag) {
  std::lock_guard lock(default_stream_tags().mutex);
  const auto& t = default_stream_tags().tags;
  return std::find(t.begin(), t.end(), tag) != t.end();
}
const void* stream_tag(vendor::StreamHandle s) {
  return s == vendor::default_stream() ? own_default_tag() : static_cast<const void*>(s);
}

// Events for the allocator's cross-stream blocks on device `d` (allocator.h). The tag of another
// thread's default stream cannot be recorded into from here: such a block waits for a device sync.
StreamEventHooks vendor_event_hooks(int d) {
  return {[d](const void* tag) -> std::shared_ptr<void> {
            vendor::StreamHandle s{};
            if (tag == own_default_tag()) s = vendor::default_stream();
            else if (is_default_stream_tag(tag)) return nullptr;
            else s = static_cast<vendor::StreamHandle>(const_cast<void*>(tag));
            const DeviceScope scope(d);
            vendor::EventHandle e{};
            if (!ok(vendor::event_create(&e))) return (void)last_error(), nullptr;
            if (!ok(vendor::event_record(e, s))) {
              (void)last_error();
              (void)vendor::event_destroy(e);
              return nullptr;
            }
            return std::shared_ptr<void>(static_cast<void*>(e), [](void* p) { (void)vendor::event_destroy(static_cast<vendor::EventHandle>(p)); });
          },
          [](const std::shared_ptr<void>& e) {
            if (ok(vendor::event_query(static_cast<vendor::EventHandle>(e.get())))) return true;
            (void)last_error();  // NotReady is latched on some runtimes: not the next launch's error
            return false;
          },
          [](const std::shared_ptr<void>& e) { (void)vendor::event_synchronize(static_cast<vendor::EventHandle>(e.get())); }};
}

// Per-device error slots in device memory (device_errors.h), allocated on first use. A slot is
// read back at a host sync only when a checking kernel was launched since the last read.
// An instantiated CUDA graph / hipGraph, launched on the thread's current stream.
class VendorGraph final : public GraphExec {
 public:
  explicit VendorGraph(vendor::GraphHandle graph) : graph_(graph) {
    VendorError e = vendor::graph_nodes(graph_, &nodes_);
    if (ok(e)) e = vendor::instantiate(&exec_, graph_);
    if (!ok(e)) {
      (void)vendor::graph_destroy(graph_);
      TESSERA_GPU_CHECK(e);
    }
  }
  ~VendorGraph() override {
    if (exec_) (void)vendor::graph_exec_destroy(exec_);
    (void)vendor::graph_destroy(graph_);
  }
  void replay() override { TESSERA_GPU_CHECK(vendor::graph_launch(exec_, vendor::current_stream())); }
  size_t nodes() const override { return nodes_; }

 private:
  vendor::GraphHandle graph_ = nullptr;
  vendor::GraphExecHandle exec_ = nullptr;
  size_t nodes_ = 0;
};

class ErrorSlots {
 public:
  static constexpr int kMaxDevices = vendor::kMaxDevices;
  // A checking kernel is about to be queued on the current stream of `d`.
  DeviceErrorSlot* arm(int d) {
    TESSERA_CHECK(d >= 0 && d < kMaxDevices, "device_error_slot", "device index ", d, " out of range");
    armed_[d].arm(stream_tag(vendor::current_stream(d)));
    if (DeviceErrorSlot* s = slots_[d].load(std::memory_order_acquire)) return s;  // every launch after the first
    std::lock_guard lock(mutex_);
    if (!slots_[d].load()) {
      const DeviceScope scope(d);
      void* p = nullptr;
      TESSERA_GPU_CHECK(vendor::allocate(&p, sizeof(DeviceErrorSlot)));
      const DeviceErrorSlot zero{};
      TESSERA_GPU_CHECK(vendor::to_device(p, &zero, sizeof zero));
      slots_[d].store(static_cast<DeviceErrorSlot*>(p), std::memory_order_release);
    }
    return slots_[d].load();
  }
  // Call after the host has waited for the stream `synced` (nullptr: the whole device): throws
  // what a kernel reported; kernels of streams not waited for stay armed.
  void check(int d, const vendor::StreamHandle* synced) {
    if (d < 0 || d >= kMaxDevices || !slots_[d].load()) return;
    if (!armed_[d].take(synced ? stream_tag(*synced) : ArmedStreams::whole_device())) return;
    const DeviceScope scope(d);
    DeviceErrorSlot s{};
    // Read on the synced stream: a legacy-stream copy is not ordered after non-blocking streams.
    const vendor::StreamHandle on = synced ? *synced : vendor::current_stream(d);
    TESSERA_GPU_CHECK(vendor::to_host_async(&s, slots_[d].load(), sizeof s, on));
    TESSERA_GPU_CHECK(vendor::stream_synchronize(on));
    if (s.op == 0) return;
    const DeviceErrorSlot zero{};
    TESSERA_GPU_CHECK(vendor::to_device_async(slots_[d].load(), &zero, sizeof zero, on));
    TESSERA_GPU_CHECK(vendor::stream_synchronize(on));
    throw Error(device_error_message(s));
  }

 private:
  std::mutex mutex_;
  std::atomic<DeviceErrorSlot*> slots_[kMaxDevices] = {};
  ArmedStreams armed_[kMaxDevices];
};
ErrorSlots g_error_slots;

// Vendor libraries keep per-stream state (cuBLASLt workspaces): they are told when a stream goes.
struct StreamReleaseHooks {
  std::mutex mutex;
  std::vector<void (*)(const void*)> hooks;
};
StreamReleaseHooks& stream_release_hooks() {
  static auto* h = new StreamReleaseHooks;
  return *h;
}

VendorStream::~VendorStream() {
  std::vector<void (*)(const void*)> hooks;
  {
    std::lock_guard lock(stream_release_hooks().mutex);
    hooks = stream_release_hooks().hooks;
  }
  if (!hooks.empty()) {
    try {
      const DeviceScope scope(device_.index);
      (void)vendor::stream_synchronize(stream_);  // its queued kernels may still use the state
      for (auto* hook : hooks) hook(stream_);
    } catch (...) {
      // A failing device at stream teardown: the state leaks rather than the destructor throwing.
    }
  }
  (void)vendor::stream_destroy(stream_);
}

void VendorStream::synchronize() {
  TESSERA_GPU_CHECK(vendor::stream_synchronize(stream_));
  g_error_slots.check(device_.index, &stream_);
}

void VendorStream::wait(Event& event) {
  auto* ve = dynamic_cast<VendorEvent*>(&event);
  if (!ve) return Stream::wait(event);  // another backend's event: wait on the host
  TESSERA_GPU_CHECK(vendor::stream_wait_event(stream_, ve->handle()));
}

thread_local Stream* t_current_stream[vendor::kMaxDevices] = {};  // the Stream objects behind vendor::current_stream(d)

class DeviceBackend final : public Backend {
 public:
  DeviceBackend(const char* name, DeviceType type, std::string targets, void (*customize)(KernelTable&))
      : name_(name), type_(type), targets_(std::move(targets)) {
    const VendorError e = vendor::device_count(&count_);
    if (!ok(e)) {
      reason_ = std::string(name) + " device query failed: " + error_text(e) + " (error " + std::to_string(static_cast<int>(e)) + ")";
      count_ = 0;  // NOTE: the count is left unwritten on failure
      (void)last_error();
    } else if (count_ == 0) {
      reason_ = "no device present";
    }
    for (int i = 0; i < count_; ++i) {
      memory_.push_back(std::make_unique<DeviceMemory>(i));
      allocators_.push_back(std::make_unique<CachingAllocator>(std::string(name) + ":" + std::to_string(i), *memory_.back()));
      // Blocks are reused only on the stream they were allocated on (see allocator.h).
      allocators_.back()->set_stream_hooks([i] { return stream_tag(vendor::current_stream(i)); },
                                           [i] {
                                             before_device_sync(i);
                                             const DeviceScope scope(i);
                                             TESSERA_GPU_CHECK(vendor::synchronize());
                                           });
      allocators_.back()->set_event_hooks(vendor_event_hooks(i));
    }
    register_all(kernels_);
    if (customize) customize(kernels_);  // vendor libraries replacing kernels (cuBLAS)
    if (count_ > 0) profile::detail::register_annotator(&vendor::range_push, &vendor::range_pop);  // NVTX / roctx
  }
  const char* name() const override { return name_; }
  DeviceType device_type() const override { return type_; }
  int device_count() const override { return count_; }
  std::string unavailable_reason() const override { return reason_; }
  DeviceInfo device_info(int i) const override {
    DeviceProps p;
    TESSERA_GPU_CHECK(vendor::properties(i, p));
    return {p.name, static_cast<int64_t>(p.memory), p.units, {{"arch", p.arch}, {"warp size", std::to_string(p.warp)}}};
  }
  std::vector<std::pair<std::string, std::string>> build_info() const override {
    int v = 0;
    (void)vendor::runtime_version(&v);
    return {{"runtime", std::to_string(v)}, {"targets", targets_},
            {"kernels", std::to_string(kernels_.count()) + "/" + std::to_string(kOpCount) + " ops"}};
  }
  CachingAllocator& allocator(int i) override { return *allocators_.at(static_cast<size_t>(i)); }
  bool host_accessible() const override { return false; }
  // Copies are ordered on the thread's current stream; the host-side ones wait for it, so the
  // host buffer is free (or filled) when they return.
  void copy_from_host(void* dst, const void* src, size_t n, int d) override {
    refuse_while_capturing(d);
    const DeviceScope scope(d);
    TESSERA_GPU_CHECK(vendor::to_device_async(dst, src, n, vendor::current_stream(d)));
    TESSERA_GPU_CHECK(vendor::stream_synchronize(vendor::current_stream(d)));
    detail::note_host_sync();
    g_error_slots.check(d, &vendor::current_stream(d));
  }
  void copy_to_host(void* dst, const void* src, size_t n, int d) override {
    refuse_while_capturing(d);
    const DeviceScope scope(d);
    TESSERA_GPU_CHECK(vendor::to_host_async(dst, src, n, vendor::current_stream(d)));
    TESSERA_GPU_CHECK(vendor::stream_synchronize(vendor::current_stream(d)));
    detail::note_host_sync();
    g_error_slots.check(d, &vendor::current_stream(d));
  }
  void copy_on_device(void* dst, int dd, const void* src, int sd, size_t n) override {
    if (dd == sd) {
      const DeviceScope scope(dd);
      TESSERA_GPU_CHECK(vendor::on_device_async(dst, src, n, vendor::current_stream(dd)));
      return;
    }
    // Ordered on the current streams, not the legacy stream (which non-blocking streams do not
    // wait for): the destination's stream waits for the source's work queued so far, then copies.
    vendor::EventHandle ready{};
    {
      const DeviceScope scope(sd);
      TESSERA_GPU_CHECK(vendor::event_create(&ready));
      const VendorError e = vendor::event_record(ready, vendor::current_stream(sd));
      if (!ok(e)) (void)vendor::event_destroy(ready);
      TESSERA_GPU_CHECK(e);
    }
    const DeviceScope scope(dd);
    VendorError e = vendor::stream_wait_event(vendor::current_stream(dd), ready);
    if (ok(e)) e = vendor::peer_async(dst, dd, src, sd, n, vendor::current_stream(dd));
    (void)vendor::event_destroy(ready);  // released once the wait is done
    TESSERA_GPU_CHECK(e);
  }
  void synchronize(int d) override {
    refuse_while_capturing(d);
    before_device_sync(d);
    const DeviceScope scope(d);
    TESSERA_GPU_CHECK(vendor::synchronize());
    detail::note_host_sync();
    g_error_slots.check(d, nullptr);
  }
  int set_current_device(int d) override {
    int previous = 0;
    TESSERA_GPU_CHECK(vendor::get_device(&previous));
    if (previous != d) TESSERA_GPU_CHECK(vendor::set_device(d));
    return previous;
  }
  Stream* set_current_stream(int d, Stream* stream) override {
    auto* vs = stream ? dynamic_cast<VendorStream*>(stream) : nullptr;
    TESSERA_CHECK(!stream || vs, "StreamGuard", "stream does not belong to the ", name_, " backend");
    TESSERA_CHECK(!vs || vs->device().index == d, "StreamGuard", "stream of ", vs ? vs->device().str() : "", " made current on ",
                  name_, ":", d);
    Stream* previous = t_current_stream[d];
    t_current_stream[d] = stream;
    vendor::current_stream(d) = vs ? vs->handle() : vendor::default_stream();
    return previous;
  }
  std::unique_ptr<Stream> new_stream(int d) override { return std::make_unique<VendorStream>(Device(type_, d)); }
  void* allocate_pinned(size_t nbytes) override {
    void* p = nullptr;
    if (!ok(vendor::host_alloc(&p, nbytes))) {
      (void)last_error();
      return nullptr;  // callers fall back to pageable memory
    }
    return p;
  }
  void free_pinned(void* p) override { (void)vendor::host_free(p); }
  void copy_from_host_async(void* dst, const void* src, size_t n, int d, Stream& stream) override {
    auto* vs = dynamic_cast<VendorStream*>(&stream);
    const DeviceScope scope(d);
    TESSERA_GPU_CHECK(vendor::to_device_async(dst, src, n, vs ? vs->handle() : vendor::current_stream()));
  }
  std::unique_ptr<Event> new_event(int d) override { return std::make_unique<VendorEvent>(d); }
  std::vector<NondeterministicOp> nondeterministic_ops() const override { return gpu::nondeterministic_ops(); }
  std::unique_ptr<Event> record_profiler_event(int d, const void** tag) override {
    auto e = std::make_unique<VendorEvent>(d);
    const DeviceScope scope(d);
    TESSERA_GPU_CHECK(vendor::event_record(e->handle(), vendor::current_stream(d)));
    *tag = stream_tag(vendor::current_stream(d));
    return e;
  }

  // Graph capture on a private stream (the per-thread default stream cannot be captured) that
  // first waits for the thread's current stream; the current stream is restored at the end. One
  // capture stream per thread and device, reused: a new stream per capture would also make new
  // vendor-library state (cuBLASLt workspaces) for each graph.
  bool supports_graphs() const override { return true; }
  void begin_capture(int d) override {
    const DeviceScope scope(d);
    Capture& c = t_captures[d];
    TESSERA_CHECK(!c.active, "graph capture", name_, ":", d, " is already capturing on this thread");
    if (!c.stream) TESSERA_GPU_CHECK(vendor::stream_create(&c.stream));
    c.previous = vendor::current_stream(d);
    vendor::EventHandle ready;
    TESSERA_GPU_CHECK(vendor::event_create(&ready));
    VendorError e = vendor::event_record(ready, c.previous);
    if (ok(e)) e = vendor::stream_wait_event(c.stream, ready);
    (void)vendor::event_destroy(ready);
    TESSERA_GPU_CHECK(e);
    vendor::current_stream(d) = c.stream;
    // Vendor handles for the capture stream are made now: cublasCreate and friends allocate and
    // synchronise, which a capture forbids (on an H200 cublasCreate failed inside one with
    // NOT_INITIALIZED and broke the capture).
    try {
      run_capture_prepare_hooks(d);
    } catch (...) {
      vendor::current_stream(d) = c.previous;
      throw;
    }
    e = vendor::begin_capture(c.stream);
    if (!ok(e)) {
      vendor::current_stream(d) = c.previous;
      TESSERA_GPU_CHECK(e);
    }
    c.active = true;
  }
  std::unique_ptr<GraphExec> end_capture(int d) override {
    const DeviceScope scope(d);
    Capture& c = t_captures[d];
    TESSERA_CHECK(c.active, "graph capture", name_, ":", d, " is not capturing on this thread");
    vendor::GraphHandle graph = nullptr;
    const VendorError e = vendor::end_capture(c.stream, &graph);
    vendor::current_stream(d) = c.previous;
    c.active = false;
    if (!ok(e)) {
      // An invalidated capture also latches its error: read it here, or the next kernel launch
      // of this thread would be refused for it (a failed capture broke the tests after it).
      (void)last_error();
      throw Error(detail::concat("graph capture: ", name_, ":", d, ": ", error_text(e)));
    }
    return std::make_unique<VendorGraph>(graph);
  }

 private:
  // A host copy or wait on a stream being captured is illegal and would invalidate the capture
  // (on an H200: "operation not permitted when stream is capturing", and the capture lost): it is
  // refused first with the emulator's message, and the capture goes on.
  void refuse_while_capturing(int d) const {
    if (d < 0 || d >= 64 || !t_captures[d].active) return;
    const char* op = detail::current_op();
    throw Error(detail::concat("graph capture: ", op ? op : "a host read or synchronisation", " waits for ", name_, ":", d,
                               " while its work is being captured (nothing captured has run yet; read results after replay())"));
  }
  struct Capture {
    vendor::StreamHandle stream = nullptr, previous = nullptr;  // the stream lives until the process ends
    bool active = false;
  };
  static thread_local Capture t_captures[64];

  const char* name_;
  DeviceType type_;
  std::string targets_, reason_;
  int count_ = 0;
  std::vector<std::unique_ptr<DeviceMemory>> memory_;
  std::vector<std::unique_ptr<CachingAllocator>> allocators_;
};
thread_local DeviceBackend::Capture DeviceBackend::t_captures[64];
}  // namespace

DeviceErrorSlot* device_error_slot(int device) { return g_error_slots.arm(device); }

/** The calling thread's current vendor stream (for vendor libraries called from host files). */
vendor::StreamHandle current_vendor_stream() { return vendor::current_stream(); }
/** Its key for per-stream state: per thread for the per-thread default stream (stream_tag). */
const void* current_stream_key() { return stream_tag(vendor::current_stream()); }
/** `hook(device)` runs before every device-wide wait on `device`. */
void add_device_sync_hook(void (*hook)(int device)) {
  std::lock_guard lock(device_sync_hooks().mutex);
  device_sync_hooks().hooks.push_back(hook);
  device_sync_hooks().any.store(true, std::memory_order_release);
}
/** `hook(device)` runs before a capture begins, its stream already current (vendor handles). */
void add_capture_prepare_hook(void (*hook)(int device)) {
  std::lock_guard lock(capture_prepare_hooks().mutex);
  capture_prepare_hooks().hooks.push_back(hook);
}
/** `hook(stream_key)` runs when a stream is destroyed, after its work finished. */
void add_stream_release_hook(void (*hook)(const void* stream_key)) {
  std::lock_guard lock(stream_release_hooks().mutex);
  stream_release_hooks().hooks.push_back(hook);
}

std::unique_ptr<Backend> make_device_backend(const char* name, DeviceType type, const char* targets,
                                             void (*customize)(KernelTable&)) {
  return std::make_unique<DeviceBackend>(name, type, targets, customize);
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
