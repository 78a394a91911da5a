#pragma once
// The backend SPI. A backend is one folder under backends/ whose register.cpp creates a
// Backend subclass, fills its kernel table and hands it to the registry. Methods marked
// (optional) have working defaults for synchronous, host-memory backends.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/backend/allocator.h"
#include "tessera/backend/kernel.h"
#include "tessera/device.h"

namespace tessera {

/** Static facts about one device, for `tessera info` and the benchmarks. */
struct DeviceInfo {
  std::string name;            ///< "AMD Ryzen 7 5800X", "NVIDIA H100", ...
  int64_t total_memory = 0;    ///< bytes
  int compute_units = 0;       ///< cores / SMs / CUs
  std::vector<std::pair<std::string, std::string>> properties;  ///< extra key/value facts
};

class Event;

/** An op whose results may differ between runs of one backend, and what deterministic mode
 *  (tessera::set_deterministic) does about it; docs/determinism.md is generated from these. */
struct NondeterministicOp {
  OpId op;
  std::string cause;               ///< "float atomic adds land in arrival order"
  std::string deterministic_mode;  ///< "a line kernel without atomics", or "error"
};

/** An ordered queue of work on one device. */
class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;
  /** Blocks until all work queued so far has finished. */
  virtual void synchronize() = 0;
  /** What the caching allocator files this stream's blocks under (the vendor handle). */
  virtual const void* tag() const { return this; }
  /**
   * Work queued on this stream after this call starts only once `event` (as last recorded,
   * on any stream of the same device) is reached; the host does not wait. An event never
   * recorded is no wait. (optional: the default waits on the host.)
   */
  virtual void wait(Event& event);
};

/** A marker in a stream; used for timing and cross-stream waits. */
class Event {
 public:
  virtual ~Event() = default;
  virtual void record(Stream& stream) = 0;
  virtual void synchronize() = 0;
  /** Milliseconds between `start` (recorded earlier) and this event. */
  virtual double elapsed_ms(const Event& start) const = 0;
};

inline void Stream::wait(Event& event) { event.synchronize(); }

/** Recorded device work (Backend::end_capture). */
class GraphExec {
 public:
  virtual ~GraphExec() = default;
  virtual void replay() = 0;
  /** Recorded kernels and copies (0 where the vendor does not say). */
  virtual size_t nodes() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  /** Short name used in messages and on the CLI: "cpu", "cuda", ... */
  virtual const char* name() const = 0;
  virtual DeviceType device_type() const = 0;
  /** Devices usable now (0 when compiled in but no device/driver is present). */
  virtual int device_count() const = 0;
  /** Why device_count() is 0 (empty when devices exist). */
  virtual std::string unavailable_reason() const { return {}; }
  virtual DeviceInfo device_info(int index) const = 0;
  /** Free-form build facts: compiled targets, library versions, ISA. */
  virtual std::vector<std::pair<std::string, std::string>> build_info() const { return {}; }

  virtual CachingAllocator& allocator(int index) = 0;
  /** True when tensors of this backend live in host-addressable memory. */
  virtual bool host_accessible() const = 0;
  /** Whether an allocation beyond the device's memory fails with an out-of-memory error (device
   *  memory), rather than being granted by an overcommitting OS (host memory, which the
   *  emulator's is too): the batch-size search caps host memory itself. */
  virtual bool allocations_fail_when_full() const { return !host_accessible(); }

  virtual void copy_from_host(void* dst, const void* src, size_t nbytes, int device) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t nbytes, int device) = 0;
  virtual void copy_on_device(void* dst, int dst_device, const void* src, int src_device, size_t nbytes) = 0;

  /** (optional) Page-locked host memory for fast asynchronous uploads; nullptr when the backend
   *  has none (then callers fall back to pageable memory and synchronous copies). */
  virtual void* allocate_pinned(size_t nbytes) {
    (void)nbytes;
    return nullptr;
  }
  /** (optional) Frees what allocate_pinned returned. */
  virtual void free_pinned(void* ptr) { (void)ptr; }
  /** (optional) Host-to-device copy queued on `stream`; the default copies synchronously. */
  virtual void copy_from_host_async(void* dst, const void* src, size_t nbytes, int device, Stream& stream) {
    (void)stream;
    copy_from_host(dst, src, nbytes, device);
  }

  /**
   * (optional) Makes `device` the calling thread's current device for kernel launches and
   * returns the previous one. The dispatcher sets it around every kernel, so a kernel for
   * device 1 never runs in device 0's context. The default (one device) does nothing.
   */
  virtual int set_current_device(int device) {
    (void)device;
    return 0;
  }

  /** Waits for all work on `device`. */
  virtual void synchronize(int device) = 0;
  /**
   * (optional) Makes `stream` (nullptr: the default stream) current for the calling thread's
   * kernels, copies and allocations on `device`; returns the previous one. The default backend
   * runs everything synchronously and ignores it.
   */
  virtual Stream* set_current_stream(int device, Stream* stream) {
    (void)device, (void)stream;
    return nullptr;
  }
  /** (optional) A new stream; the default runs everything synchronously. */
  virtual std::unique_ptr<Stream> new_stream(int device);
  /** (optional) A new event; the default records host time. */
  virtual std::unique_ptr<Event> new_event(int device);

  /** (optional) The ops whose results may vary between runs (default: none; every kernel is
   *  run-to-run deterministic whatever the thread count). */
  virtual std::vector<NondeterministicOp> nondeterministic_ops() const { return {}; }

  /**
   * (optional, the profiler) A new event recorded now on the calling thread's current stream of
   * `device`, with that stream's tag in `*stream_tag` (nullptr: the default stream); nullptr
   * where kernels have no timeline apart from the host's (host backends: a kernel's host span
   * is its run time). Two of these around a launch give the kernel's device time.
   */
  virtual std::unique_ptr<Event> record_profiler_event(int device, const void** stream_tag) {
    (void)device, (void)stream_tag;
    return nullptr;
  }

  /**
   * (optional) Graph capture: between begin_capture and end_capture the calling thread's device
   * work on `device` (kernels, device copies) is recorded instead of run; a host
   * synchronisation in between is an error. The result replays the recorded work on the stream
   * current at replay time. CUDA Graphs, hipGraph, the emulator's launch list.
   */
  virtual bool supports_graphs() const { return false; }
  virtual void begin_capture(int device);
  virtual std::unique_ptr<GraphExec> end_capture(int device);

  const KernelTable& kernels() const { return kernels_; }
  /**
   * Whether op runs here at `dtype` (the kernel_dtype of its operands): a kernel exists, the op
   * takes the dtype at all (op_dtypes), and the kernel does not refuse it. The dispatcher checks
   * it before every launch (an unsupported pair is the CPU fallback's or a NotImplemented error
   * naming op, backend and dtype), and ops with a better way round a gap ask it first (scatter_add
   * accumulates 16-bit floats in f32 where a device has no 16-bit atomics).
   */
  bool supports(OpId op, DType dtype) const {
    return kernels_[op] != nullptr && op_dtypes(op).contains(dtype) && !kernels_.refusal(op).dtypes.contains(dtype);
  }
  /** Substitutes `fn` for op's kernel and returns the one it replaces (test harnesses: planted
   *  wrong kernels for the benchmark's correctness gate). Not while kernels may be running. */
  KernelFn replace_kernel(OpId op, KernelFn fn) {
    KernelFn previous = kernels_[op];
    kernels_[op] = fn;
    return previous;
  }
  /** Substitutes op's declared refusal and returns the one it replaces (tests of the dispatcher's
   *  handling of a refused dtype). Not while kernels may be running. */
  KernelTable::Refusal replace_refusal(OpId op, KernelTable::Refusal refusal) {
    const KernelTable::Refusal previous = kernels_.refusal(op);
    kernels_.refuse(op, refusal.dtypes, refusal.why);
    return previous;
  }

 protected:
  KernelTable kernels_;
};

}  // namespace tessera
