#pragma once
// The recording side of the profiler (tessera/profiler.h), used by the op dispatcher, the
// allocators, the autograd engine and the backends.
#include <atomic>
#include <memory>
#include <span>
#include <string>

#include "tessera/backend/annotator.h"
#include "tessera/backend/backend.h"
#include "tessera/profiler.h"

namespace tessera::profile::detail {

extern std::atomic<bool> g_recording;
inline bool on() { return g_recording.load(std::memory_order_relaxed); }
/** Set while the CPU cross-check runs: scopes are tracked (for its reports) without recording. */
extern std::atomic<bool> g_track_scopes;

/** Nanoseconds since the profile started. */
int64_t now_ns();
/** Appends a finished span to the calling thread's track. */
void add_span(std::string name, const char* category, int64_t begin_ns, int64_t end_ns, std::string args_json = {});
/** Appends a counter sample (e.g. "memory cpu:0" in bytes) at the current time. */
void add_counter(const std::string& name, double value);

/** Pushes / pops a range on every registered annotator (tessera/backend/annotator.h). */
void annotate_push(const char* name);
void annotate_pop();

/** The span of one kernel launch (run_kernel): host time on the thread's track and, where the
 *  backend records device events, device time on the current stream's track. */
class KernelSpan {
 public:
  KernelSpan(OpId op, Backend& backend, Device device, std::span<const Tensor> inputs, std::span<Tensor> outputs);
  ~KernelSpan();
  KernelSpan(const KernelSpan&) = delete;
  KernelSpan& operator=(const KernelSpan&) = delete;

 private:
  const char* name_;
  Backend& backend_;
  Device device_;
  int64_t begin_ns_ = 0;
  std::string args_;
  std::unique_ptr<Event> device_begin_;
  const void* stream_ = nullptr;
};

/** Estimated floating-point operations of one kernel (0 where not counted: bytes dominate). */
double kernel_flops(OpId op, std::span<const Tensor> inputs, std::span<Tensor> outputs);

}  // namespace tessera::profile::detail
