#pragma once
// Process-level controls: threads, synchronisation and memory statistics.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/backend/allocator.h"
#include "tessera/device.h"
#include "tessera/dtype.h"
#include "tessera/shape.h"

namespace tessera {

/** Worker threads for host-parallel backends (0 = all cores). */
void set_num_threads(int threads);
int num_threads();
/**
 * Precision policy for f32 products (matmul, linear, conv) on NVIDIA GPUs: false (the default)
 * keeps them strict IEEE f32 in cuBLAS, cuBLASLt and cuDNN; true lets those libraries use TF32
 * tensor cores (10-bit mantissa inputs, f32 accumulation), ~8x faster on sm_80+ but with
 * ~1e-3 relative error. The environment variable TESSERA_ALLOW_TF32=1 sets the initial value.
 * Other backends compute f32 in f32 regardless.
 */
void set_allow_tf32(bool allow);
bool allow_tf32();
/**
 * Fused training kernels (on by default; TESSERA_FUSED=0 sets the initial value to off): the
 * softmax + cross-entropy backward and dropout + residual add run as one kernel each. Off, the
 * same results come from compositions of basic ops: the reference the fused kernels are tested
 * and benchmarked against.
 */
void set_fused_kernels(bool on);
bool fused_kernels();
/**
 * Deterministic mode (off by default; TESSERA_DETERMINISTIC=1 sets the initial value to on):
 * every op gives bit-identical results from run to run on the same device, whatever the thread
 * count, the stream schedule or the launch geometry. Ops whose fast path is not (float atomics:
 * scatter_add and so embedding and index_select gradients on GPUs) switch to a deterministic
 * kernel; an op with no deterministic path raises tessera::Error naming it. Which ops switch, per
 * backend: docs/determinism.md (from `tessera info --determinism`).
 */
void set_deterministic(bool on);
bool deterministic();

/** An op whose output on a device differed from the CPU backend's on the same inputs. */
struct Divergence {
  std::string op, device, shapes, dtype;
  std::string scope;         ///< the enclosing profile::Scope names, outermost first ("train step > forward > 3:Conv2d")
  double max_error = 0;      ///< largest |device - cpu| over the output
  double tolerance = 0;      ///< what the output's dtype allowed
  int64_t op_index = 0;      ///< ops cross-checked before it (0: the first)
  std::string text() const;  ///< one line naming all of the above
};
/**
 * CPU cross-check (`tessera train --check-against cpu`): while on, every kernel launched on a
 * non-CPU device also runs on the CPU backend with host copies of the same inputs (and of the
 * outputs' previous contents, for in-place ops), and the outputs are compared within their
 * dtype's tolerance, relative to the output's largest magnitude: f32 1e-5 x sqrt(terms summed
 * per output), f16 2e-3, bf16 1e-2; exact for integers. The first divergence is kept; later
 * ones are only counted. Several times slower.
 */
void set_check_against_cpu(bool on);
bool check_against_cpu();
/** The first divergence since the check was turned on, if any. */
std::optional<Divergence> first_divergence();
/**
 * CPU fallback for ops a backend lacks (off by default; TESSERA_CPU_FALLBACK=1 sets the initial
 * value to on): instead of tessera::NotImplemented, the op runs on the CPU backend with host
 * copies of its operands and the results are copied back, and the first fallback of each op
 * and backend is logged to stderr. For bringing up a new backend, not for speed.
 */
void set_cpu_fallback(bool on);
bool cpu_fallback();
/** Kernels run on the CPU in place of a missing device kernel so far. */
int64_t cpu_fallback_count();
/** Kernels compared / found diverging since the check was turned on. */
int64_t cross_checked_kernels();
int64_t divergent_kernels();

/** Waits for all queued work on `device`. */
void synchronize(Device device = kCPU);
/** Allocator statistics of `device`. */
AllocatorStats memory_stats(Device device = kCPU);
/** Restarts `device`'s peak_in_use_bytes from the bytes in use now. */
void reset_peak_memory(Device device = kCPU);
/** Caps the bytes `device`'s allocator may reserve (0 = no cap). */
void set_memory_limit(Device device, int64_t bytes);
/** Fault injection (tests): the next `count` raw allocations of `device` fail as out of memory. */
void inject_allocation_failures(Device device, int64_t count);
/** Returns cached blocks of `device`'s allocator to the system. */
void empty_cache(Device device = kCPU);

class Tensor;
class Stream;
/**
 * A contiguous host copy of `host` in page-locked memory of `device`'s backend, for
 * asynchronous uploads; a plain contiguous host tensor when the backend has no pinned memory.
 */
Tensor pin_memory(const Tensor& host, Device device);
/**
 * An uninitialised contiguous host tensor in page-locked memory of `device`'s backend, taken
 * from a process-wide pool of such buffers (page-locked allocation costs far more than a copy,
 * and freeing it synchronises the device); the buffer returns to the pool when the tensor
 * dies. Pageable memory when the backend has none.
 */
Tensor empty_pinned(const Shape& shape, DType dtype, Device device);
/** Uploads a contiguous host tensor to `device`, queued on `stream` (wait on the stream before use). */
Tensor to_device_async(const Tensor& host, Device device, Stream& stream);

/**
 * Makes `stream` the current stream of its device for this thread while the guard lives:
 * kernels, copies and new allocations on that device are queued on it (backends without
 * streams run synchronously and ignore it). Guards nest; the previous stream is restored.
 */
class StreamGuard {
 public:
  explicit StreamGuard(Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
  Stream* previous_;
};

/**
 * Declares that `t`'s memory is used by work on `stream` (other than the stream it was
 * allocated on): when `t` is freed its block is not reused until the device is synchronised.
 */
void record_stream(const Tensor& t, Stream& stream);
/** record_stream with the calling thread's current stream on t's device (the default stream
 *  when no StreamGuard is active): for tensors made on another stream, such as a loader's. */
void record_current_stream(const Tensor& t);

/**
 * Host synchronisations: each time the host waited for a device (a copy to the host, `item()`,
 * `synchronize`, a pageable upload), counted per process and attributed to the outermost op
 * running on the calling thread at the time ("(host)" outside any op). Device backends report
 * them; a training step that syncs more than once per logged loss stalls the GPU.
 */
struct HostSyncStats {
  int64_t total = 0;
  std::vector<std::pair<std::string, int64_t>> by_op;  ///< sorted by name
};
HostSyncStats host_sync_stats();
void reset_host_sync_stats();

namespace detail {
/** Called by backends when the host blocks on `device`. */
void note_host_sync();
/** Marks the calling thread as running `op` while it lives (nested scopes keep the outer op). */
class OpScope {
 public:
  explicit OpScope(const char* op);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  bool outer_;
};
/** The outermost op running on this thread, or nullptr. */
const char* current_op();
}  // namespace detail

}  // namespace tessera
