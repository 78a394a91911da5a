#pragma once
// Emulated streams: deferred queues of device work, so stream-ordering bugs show up without a
// GPU. Work submitted on the default stream runs at once (like a GPU that is idle); work on a
// user stream waits in that stream's queue until something synchronises (a stream or device
// synchronize, an event wait, a copy to the host on that stream). Queued work of all streams
// then runs interleaved in the emulator's schedule (forward: oldest stream first, reverse:
// newest first, random: seeded), keeping each stream's order and its event waits. A missing
// Stream::wait or synchronize therefore reads stale data under some schedule, as it may on a
// real GPU where user streams do not synchronise with the default stream.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessera::emu {

/** A point in a stream: done once the work queued before it has run. */
struct EventToken {
  bool done = false;
  double when_ms = 0;  // host time when it was reached
};

/** One emulated stream's queue on one device. Destroying it first runs what it still holds. */
class Queue {
 public:
  explicit Queue(int device);
  ~Queue();
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;
  int id() const { return id_; }
  int device() const { return device_; }

 private:
  int id_;
  int device_;
};

/** Emulated devices (TESSERA_EMU_DEVICES, 1..8, default 2). */
inline constexpr int kMaxDevices = 8;
/** The calling thread's current device for launches (set around every op by the backend). */
int& current_device();
/** The calling thread's current queue on `device`; nullptr is the default stream. */
Queue*& current_queue(int device);

/** Device memory bookkeeping, so a launch can check that each pointer it gets belongs to the
 *  current device (on a GPU a kernel touching another device's memory faults or reads garbage). */
void add_allocation(const void* p, size_t bytes, int device);
void remove_allocation(const void* p);
/** The device owning p, or -1 when p is not emulated device memory. */
int owner(const void* p);
/** Throws tessera::Error when p is memory of a device other than the current one. */
void check_argument(const void* p);
/** Runs `work` now (q == nullptr) or appends it to q. Throws, as CUDA and HIP fail a launch
 *  with "invalid resource handle", when q belongs to another device than the current one. */
void submit(Queue* q, std::function<void()> work);
/** Runs queued work until q is empty (nullptr: until every queue is empty). */
void drain(Queue* q);
/** Marks the current end of q (nullptr: the default stream, already reached). */
std::shared_ptr<EventToken> record(Queue* q);
/** q's later work starts only after `token` is reached (nullptr: no wait, like an unrecorded event). */
void wait(Queue* q, std::shared_ptr<EventToken> token);
/** Whether `token` was reached, without running anything (cudaEventQuery). */
bool query(const std::shared_ptr<EventToken>& token);
/** Runs queued work until `token` is reached. */
void drain_until(const std::shared_ptr<EventToken>& token);
/** Graph capture: while a list is set for `device` on the calling thread, work submitted for the
 *  current device is appended to it instead of running or queueing. */
using WorkList = std::vector<std::function<void()>>;
void set_capture(int device, WorkList* list);
WorkList* capture(int device);
/**
 * The thread's capture mode (cudaThreadExchangeStreamCaptureMode). While a thread captures in the
 * default (thread-local) mode, a potentially unsafe call on it - an allocation - fails and
 * invalidates the capture, as on CUDA: end_capture then reports "operation failed due to a
 * previous error during capture". Relaxed mode permits it; the allocators switch to it around
 * their allocation, as PyTorch's does.
 */
enum class CaptureMode { thread_local_mode, relaxed };
CaptureMode exchange_capture_mode(CaptureMode mode);
/** Whether an unsafe call on this thread may go ahead; if not, the capture is invalidated. */
bool unsafe_call_allowed(int device);
/** Whether the thread's capture on `device` was invalidated; clears the mark. */
bool take_capture_invalidated(int device);
/**
 * The calling thread's latched "last error", as cudaGetLastError / hipGetLastError keep it: a
 * call that failed without its error being read leaves it for whoever asks next (ROCm 7 also
 * latches NotReady from event polling). gpu::launch reads it before launching, so such an error
 * is never blamed on the kernel that happens to come next.
 */
enum class LastError { success, not_ready, failure };
void set_last_error(LastError code, std::string text);
/** Returns and clears the latched error and its text. */
std::pair<LastError, std::string> take_last_error();
/** gpu::launch's two checks: before (a NotReady is dropped, another error reported as an earlier
 *  call's) and after (an error latched by the launch itself is the kernel's). */
void clear_stale_error();
void check_launch();
/** Work queued now in all streams (for tests). */
size_t pending_work();

}  // namespace tessera::emu
