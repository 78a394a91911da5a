// The emulated GPU backend: device type `emulated`, memory in host RAM but reached only through
// the device copy calls (like a discrete GPU), kernels from backends/gpu run by the CPU
// emulation of the execution model (execution.h). It exists to verify the GPU kernels, so it
// is as strict as hardware where it can be: several devices (TESSERA_EMU_DEVICES, default 2)
// whose memory a kernel of another device may not touch, user streams as deferred queues
// (streams.h), launch limits, device-side error reports raised at the next host sync.
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "../gpu/device_errors.h"
#include "../gpu/error_arming.h"
#include "../gpu/kernels.h"
#include "execution.h"
#include "streams.h"
#include "tessera/backend/registry.h"
#include "tessera/runtime.h"

namespace tessera {
namespace {
// The error slots ("device memory" of each device) and the streams that queued a checking kernel
// since the slot was last read.
std::array<gpu::DeviceErrorSlot, emu::kMaxDevices> g_error_slots;
std::array<gpu::ArmedStreams, emu::kMaxDevices> g_error_armed;

int device_count_from_env() {
  const char* e = std::getenv("TESSERA_EMU_DEVICES");
  const int n = e ? std::atoi(e) : 2;
  return n < 1 ? 1 : n > emu::kMaxDevices ? emu::kMaxDevices : n;
}

// The host waited for the stream `synced` of `device` (ArmedStreams::whole_device(): for all of
// them): count it and raise what that stream's kernels reported since the last read.
void host_sync(int device, const void* synced) {
  if (emu::capture(device)) {
    const char* op = detail::current_op();
    throw Error(detail::concat("graph capture: ", op ? op : "a host read or synchronisation", " waits for emulated:", device,
                               " while its work is being captured (nothing captured has run yet; read results after replay())"));
  }
  detail::note_host_sync();
  if (!g_error_armed[device].take(synced)) return;
  const gpu::DeviceErrorSlot s = g_error_slots[device];
  if (s.op == 0) return;
  g_error_slots[device] = {};
  throw Error(gpu::device_error_message(s));
}

class EmulatedMemory final : public RawAllocator {
 public:
  explicit EmulatedMemory(int device) : device_(device) {}
  void* raw_alloc(size_t nbytes) override {
    // Relaxed capture mode around the allocation, as the CUDA backend does: an allocation inside a
    // thread-local capture would otherwise fail and invalidate the capture.
    struct Relaxed {
      emu::CaptureMode previous = emu::exchange_capture_mode(emu::CaptureMode::relaxed);
      ~Relaxed() { emu::exchange_capture_mode(previous); }
    } const relaxed;
    if (!emu::unsafe_call_allowed(device_)) {  // as the CUDA backend reports a non-OOM failure
      throw Error(detail::concat("allocate: emulated:", device_, ": operation not permitted when stream is capturing (", nbytes, " B)"));
    }
    const size_t bytes = (nbytes + 255) / 256 * 256;
    void* p = std::aligned_alloc(256, bytes);
    if (p) emu::add_allocation(p, bytes, device_);
    return p;
  }
  void raw_free(void* p) override {
    emu::drain(nullptr);  // like cudaFree: queued work that may still use p finishes first
    emu::remove_allocation(p);
    std::free(p);
  }
  bool host_accessible() const override { return true; }  // guard bytes can be checked

 private:
  int device_;
};

class EmulatedStream final : public Stream {
 public:
  explicit EmulatedStream(int device) : device_(device), queue_(device) {}
  Device device() const override { return Device(DeviceType::emulated, device_); }
  void synchronize() override {
    emu::drain(&queue_);
    host_sync(device_, &queue_);
  }
  void wait(Event& event) override;
  emu::Queue& queue() { return queue_; }

 private:
  int device_;
  emu::Queue queue_;
};

class EmulatedEvent final : public Event {
 public:
  void record(Stream& s) override {
    auto* es = dynamic_cast<EmulatedStream*>(&s);
    token_ = emu::record(es ? &es->queue() : nullptr);
  }
  void record_on(emu::Queue* q) { token_ = emu::record(q); }  // nullptr: the default (synchronous) stream
  void synchronize() override { emu::drain_until(token_); }
  double elapsed_ms(const Event& start) const override {
    const auto& s = dynamic_cast<const EmulatedEvent&>(start);
    TESSERA_CHECK(token_ && s.token_ && token_->done && s.token_->done, "Event::elapsed_ms", "both events must have been reached");
    return token_->when_ms - s.token_->when_ms;
  }
  const std::shared_ptr<emu::EventToken>& token() const { return token_; }

 private:
  std::shared_ptr<emu::EventToken> token_;
};

void EmulatedStream::wait(Event& event) {
  auto* ee = dynamic_cast<EmulatedEvent*>(&event);
  if (!ee) return Stream::wait(event);
  emu::wait(&queue_, ee->token());
}

thread_local Stream* t_current_stream[emu::kMaxDevices] = {};

// The recorded launch list: replay submits each item again, in order, to the current stream.
class EmulatedGraph final : public GraphExec {
 public:
  EmulatedGraph(int device, emu::WorkList work) : device_(device), work_(std::move(work)) {}
  void replay() override {
    for (const auto& w : work_) emu::submit(emu::current_queue(device_), w);
  }
  size_t nodes() const override { return work_.size(); }

 private:
  int device_;
  emu::WorkList work_;
};

// Makes `device` the emulator's current device for a scope (copies submit to its streams).
class DeviceScope {
 public:
  explicit DeviceScope(int device) : previous_(std::exchange(emu::current_device(), device)) {}
  ~DeviceScope() { emu::current_device() = previous_; }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_;
};

// Events for the allocator's cross-stream blocks: a marker in the stream's queue (the default
// stream, tag nullptr, has already run everything submitted to it).
StreamEventHooks emulated_event_hooks() {
  return {[](const void* tag) -> std::shared_ptr<void> { return emu::record(const_cast<emu::Queue*>(static_cast<const emu::Queue*>(tag))); },
          [](const std::shared_ptr<void>& e) { return emu::query(std::static_pointer_cast<emu::EventToken>(e)); },
          [](const std::shared_ptr<void>& e) { emu::drain_until(std::static_pointer_cast<emu::EventToken>(e)); }};
}

class EmulatedBackend final : public Backend {
 public:
  EmulatedBackend() : count_(device_count_from_env()) {
    const char* g = std::getenv("TESSERA_ALLOC_GUARD");
    guards_ = g && std::strcmp(g, "0") != 0;
    for (int d = 0; d < count_; ++d) {
      memory_.push_back(std::make_unique<EmulatedMemory>(d));
      allocators_.push_back(std::make_unique<CachingAllocator>("emulated:" + std::to_string(d), *memory_.back()));
      allocators_.back()->set_guards(guards_);
      // Blocks are reused only on the stream they were allocated on. With guard bytes, queued
      // work runs before an allocation: the guards are written by the host, not in stream order.
      const bool guards = guards_;
      allocators_.back()->set_stream_hooks(
          [d, guards] {
            emu::Queue* q = emu::current_queue(d);
            if (guards && q) emu::drain(q);
            return static_cast<const void*>(q);
          },
          [] { emu::drain(nullptr); });
      allocators_.back()->set_event_hooks(emulated_event_hooks());
    }
    gpu::emulated::register_all(kernels_);
    emu::set_label_source([] { return detail::current_op(); });  // access counters file kernels under their op
  }
  const char* name() const override { return "emulated"; }
  DeviceType device_type() const override { return DeviceType::emulated; }
  int device_count() const override { return count_; }
  DeviceInfo device_info(int) const override {
    const auto& s = emu::settings();
    const char* sched = s.schedule == emu::Schedule::forward ? "forward" : s.schedule == emu::Schedule::reverse ? "reverse" : "random";
    return {"CPU emulation of the CUDA/HIP execution model", 0, 0,
            {{"warp size", std::to_string(s.warp_size)}, {"schedule", sched}, {"threads", "fibers (Boost.Context)"},
             {"streams", "deferred queues"}}};
  }
  CachingAllocator& allocator(int d) override { return *allocators_.at(static_cast<size_t>(d)); }
  bool host_accessible() const override { return false; }
  bool allocations_fail_when_full() const override { return false; }  // host memory behind the strict façade
  int set_current_device(int d) override {
    const int previous = emu::current_device();
    emu::current_device() = d;
    return previous;
  }
  // Host copies wait for the thread's current stream on the device (like the CUDA backend).
  void copy_from_host(void* dst, const void* src, size_t n, int d) override {
    emu::drain(emu::current_queue(d));
    host_sync(d, emu::current_queue(d));
    std::memcpy(dst, src, n);
  }
  void copy_to_host(void* dst, const void* src, size_t n, int d) override {
    emu::drain(emu::current_queue(d));
    host_sync(d, emu::current_queue(d));
    std::memcpy(dst, src, n);
  }
  void copy_on_device(void* dst, int dd, const void* src, int sd, size_t n) override {
    // Ordered like the CUDA backend's: on the destination's current stream, after the source's
    // current stream has reached the point of the call (an event), not at once.
    std::shared_ptr<emu::EventToken> source_ready;
    if (dd != sd) source_ready = emu::record(emu::current_queue(sd));
    const DeviceScope scope(dd);
    emu::wait(emu::current_queue(dd), source_ready);
    emu::submit(emu::current_queue(dd), [dst, src, n] { std::memcpy(dst, src, n); });
  }
  void synchronize(int d) override {
    emu::drain(nullptr);
    host_sync(d, gpu::ArmedStreams::whole_device());
  }
  Stream* set_current_stream(int d, Stream* stream) override {
    auto* es = stream ? dynamic_cast<EmulatedStream*>(stream) : nullptr;
    TESSERA_CHECK(!stream || es, "StreamGuard", "stream does not belong to the emulated backend");
    TESSERA_CHECK(!es || es->device().index == d, "StreamGuard", "stream of ", es ? es->device().str() : "", " made current on emulated:", d);
    Stream* previous = t_current_stream[d];
    t_current_stream[d] = stream;
    emu::current_queue(d) = es ? &es->queue() : nullptr;
    return previous;
  }
  std::unique_ptr<Stream> new_stream(int d) override { return std::make_unique<EmulatedStream>(d); }
  bool supports_graphs() const override { return true; }
  void begin_capture(int d) override {
    TESSERA_CHECK(!emu::capture(d), "graph capture", "emulated:", d, " is already capturing on this thread");
    emu::drain(emu::current_queue(d));  // work queued before the capture is not part of it
    captures_[static_cast<size_t>(d)] = std::make_unique<emu::WorkList>();
    emu::set_capture(d, captures_[static_cast<size_t>(d)].get());
  }
  std::unique_ptr<GraphExec> end_capture(int d) override {
    TESSERA_CHECK(emu::capture(d), "graph capture", "emulated:", d, " is not capturing on this thread");
    emu::set_capture(d, nullptr);
    if (emu::take_capture_invalidated(d)) {
      captures_[static_cast<size_t>(d)].reset();
      throw Error(detail::concat("graph capture: emulated:", d, ": operation failed due to a previous error during capture"));
    }
    auto graph = std::make_unique<EmulatedGraph>(d, std::move(*captures_[static_cast<size_t>(d)]));
    captures_[static_cast<size_t>(d)].reset();
    return graph;
  }
  std::unique_ptr<Event> new_event(int) override { return std::make_unique<EmulatedEvent>(); }
  std::vector<NondeterministicOp> nondeterministic_ops() const override { return gpu::emulated::nondeterministic_ops(); }
  std::unique_ptr<Event> record_profiler_event(int d, const void** stream_tag) override {
    auto e = std::make_unique<EmulatedEvent>();
    e->record_on(emu::current_queue(d));
    *stream_tag = emu::current_queue(d);
    return e;
  }
  // "Pinned" memory is ordinary host memory here, but the loader takes the same path as on a GPU.
  void* allocate_pinned(size_t nbytes) override {
    ++pinned_allocations_;
    return std::aligned_alloc(256, (nbytes + 255) / 256 * 256);
  }
  void free_pinned(void* p) override { std::free(p); }
  void copy_from_host_async(void* dst, const void* src, size_t n, int, Stream& stream) override {
    auto* es = dynamic_cast<EmulatedStream*>(&stream);
    const DeviceScope scope(es ? es->device().index : emu::current_device());
    emu::submit(es ? &es->queue() : nullptr, [dst, src, n] { std::memcpy(dst, src, n); });
  }
  std::vector<std::pair<std::string, std::string>> build_info() const override {
    return {{"kernels", std::to_string(kernels_.count()) + "/" + std::to_string(kOpCount) + " ops"},
            {"pinned allocations", std::to_string(pinned_allocations_.load())}};
  }

 private:
  int count_;
  bool guards_ = false;
  std::atomic<int64_t> pinned_allocations_{0};
  std::vector<std::unique_ptr<EmulatedMemory>> memory_;
  std::vector<std::unique_ptr<CachingAllocator>> allocators_;
  static thread_local std::array<std::unique_ptr<emu::WorkList>, emu::kMaxDevices> captures_;
};
thread_local std::array<std::unique_ptr<emu::WorkList>, emu::kMaxDevices> EmulatedBackend::captures_;
}  // namespace

namespace gpu::emulated {
DeviceErrorSlot* device_error_slot(int device) {
  g_error_armed.at(static_cast<size_t>(device)).arm(emu::current_queue(device));
  return &g_error_slots.at(static_cast<size_t>(device));
}
}  // namespace gpu::emulated

void register_emulated_backend() { register_backend(std::make_unique<EmulatedBackend>()); }

}  // namespace tessera
