#pragma once
// The one place that differs between CUDA, HIP and the CPU emulation. Kernel files include
// only this header (and core/kernels functors) and call gpu:: wrappers, never vendor APIs:
//   TESSERA_GLOBAL void k(...)         a kernel
//   gpu::launch(k, grid, block, smem, cooperative, args...)
//   gpu::thread_x(), block_x(), block_dim_x(), grid_dim_x(), global_index(), grid_stride()
//   gpu::sync_threads(), gpu::shfl_down(v, d), gpu::shfl_xor(v, m), gpu::lane(), gpu::warp_size()
//   TESSERA_SHARED_ARRAY(T, name, count), gpu::dynamic_shared<T>()
//   gpu::atomic_add(ptr, value)
// `cooperative` says whether the kernel uses barriers, shuffles or shared memory: the emulator
// runs cooperative kernels' threads as fibers and others as a plain loop.
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "tessera/error.h"
#include "tessera/kernels/half.h"
#include "tessera/kernels/macros.h"

#if defined(__CUDACC__) || defined(__HIPCC__)
#if defined(__HIPCC__)
#include <dlfcn.h>
#include <hip/hip_runtime.h>
#define TESSERA_GPU_TARGET hip
#else
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#define TESSERA_GPU_TARGET cuda
#endif
// Every kernel's launch bound (gpu::kMaxBlockThreads): ptxas and hipcc then give each thread
// the registers that fit 256 threads (hipcc otherwise assumes 1024 and caps gfx90a at 128 VGPRs).
#define TESSERA_GLOBAL __global__ __launch_bounds__(256)
#define TESSERA_DEVICE __device__ __forceinline__
#else
#include <atomic>
#include <source_location>

#include "../emulated/access_counters.h"
#include "../emulated/execution.h"
#include "../emulated/streams.h"
#define TESSERA_GPU_TARGET emulated
#define TESSERA_GLOBAL
#define TESSERA_DEVICE inline
#endif

#if !defined(__CUDACC__) && !defined(__HIPCC__)
namespace tessera::emu {
/** Calls the kernel with its arguments (already copied out of the launch closure). */
template <class... KArgs> void enter_kernel(void (*kernel)(KArgs...), KArgs... args) {
  access::kernel_entry();
  kernel(args...);
}
}  // namespace tessera::emu
#endif

namespace tessera::gpu {

struct Grid {
  unsigned x = 1, y = 1, z = 1;
};

/** The most threads any Tessera kernel launches per block (kThreads, four MMA warps of 64, 16x16
 *  tiles), declared to the compilers as every kernel's __launch_bounds__ (TESSERA_GLOBAL). A
 *  launch with more fails on hardware ("too many resources requested"), and so in the emulator. */
inline constexpr unsigned kMaxBlockThreads = 256;

#if defined(__CUDACC__) || defined(__HIPCC__)
#if defined(__HIPCC__)
using VendorError = hipError_t;
inline bool ok(VendorError e) { return e == hipSuccess; }
inline const char* error_text(VendorError e) { return hipGetErrorString(e); }
inline VendorError last_error() { return hipGetLastError(); }
#else
using VendorError = cudaError_t;
inline bool ok(VendorError e) { return e == cudaSuccess; }
inline const char* error_text(VendorError e) { return cudaGetErrorString(e); }
inline VendorError last_error() { return cudaGetLastError(); }
#endif
/** Throws tessera::Error with the call, file and line when a vendor call fails. */
#define TESSERA_GPU_CHECK(call)                                                                          \
  do {                                                                                                   \
    const auto tessera_e_ = (call);                                                                      \
    if (!::tessera::gpu::ok(tessera_e_))                                                                 \
      throw ::tessera::Error(::tessera::detail::concat(#call, " failed at ", __FILE__, ":", __LINE__, ": ", \
                                                       ::tessera::gpu::error_text(tessera_e_)));          \
  } while (0)
inline void check_launch() { TESSERA_GPU_CHECK(last_error()); }
/**
 * Before a launch: the runtime keeps the first unread error of earlier calls (an ignored return
 * value, a latched NotReady from event polling on ROCm 7) and check_launch would blame it on
 * this kernel. NotReady is no failure and is dropped; anything else is reported as what it is.
 */
inline void clear_stale_error(VendorError not_ready_code) {
  const VendorError e = last_error();
  if (ok(e) || e == not_ready_code) return;
  throw ::tessera::Error(::tessera::detail::concat("gpu: an earlier call failed and its error was not read: ", error_text(e),
                                                   " (found before a kernel launch, which did not run)"));
}

/** Device properties the backend reports. */
struct DeviceProps {
  std::string name, arch;
  size_t memory = 0;
  int units = 0, warp = 0;
};

// The runtime calls the device backend (device_backend.cu) needs, one spelling per vendor.
namespace vendor {
#if defined(__HIPCC__)
// roctx ranges (the profiler's scopes, for rocprof and Omnitrace): libroctx64 is part of
// roctracer, which most ROCm hosts have and Debian does not, so it is looked up at run time.
struct Roctx {
  int (*push)(const char*) = nullptr;
  int (*pop)() = nullptr;
  Roctx() {
    void* lib = dlopen("libroctx64.so.4", RTLD_LAZY | RTLD_LOCAL);
    if (!lib) lib = dlopen("libroctx64.so", RTLD_LAZY | RTLD_LOCAL);
    if (!lib) return;
    push = reinterpret_cast<int (*)(const char*)>(dlsym(lib, "roctxRangePushA"));
    pop = reinterpret_cast<int (*)()>(dlsym(lib, "roctxRangePop"));
    if (!push || !pop) push = nullptr, pop = nullptr;
  }
};
inline const Roctx& roctx() {
  static const Roctx r;
  return r;
}
inline void range_push(const char* name) {
  if (roctx().push) roctx().push(name);
}
inline void range_pop() {
  if (roctx().pop) roctx().pop();
}
inline VendorError device_count(int* n) { return hipGetDeviceCount(n); }
inline VendorError set_device(int d) { return hipSetDevice(d); }
inline VendorError get_device(int* d) { return hipGetDevice(d); }
inline VendorError allocate(void** p, size_t n) {  // relaxed capture mode: see the CUDA variant
  hipStreamCaptureMode mode = hipStreamCaptureModeRelaxed;
  (void)hipThreadExchangeStreamCaptureMode(&mode);
  const VendorError e = hipMalloc(p, n);
  (void)hipThreadExchangeStreamCaptureMode(&mode);
  return e;
}
inline bool out_of_memory(VendorError e) { return e == hipErrorOutOfMemory; }
inline VendorError release(void* p) { return hipFree(p); }
inline VendorError to_device(void* d, const void* s, size_t n) { return hipMemcpy(d, s, n, hipMemcpyHostToDevice); }
inline VendorError to_host(void* d, const void* s, size_t n) { return hipMemcpy(d, s, n, hipMemcpyDeviceToHost); }
inline VendorError on_device(void* d, const void* s, size_t n) { return hipMemcpy(d, s, n, hipMemcpyDeviceToDevice); }
inline VendorError synchronize() { return hipDeviceSynchronize(); }
inline VendorError runtime_version(int* v) { return hipRuntimeGetVersion(v); }
using StreamHandle = hipStream_t;
using EventHandle = hipEvent_t;
inline VendorError stream_create(StreamHandle* s) { return hipStreamCreateWithFlags(s, hipStreamNonBlocking); }
inline VendorError stream_destroy(StreamHandle s) { return hipStreamDestroy(s); }
inline VendorError stream_synchronize(StreamHandle s) { return hipStreamSynchronize(s); }
inline VendorError event_create(EventHandle* e) { return hipEventCreate(e); }
inline VendorError event_destroy(EventHandle e) { return hipEventDestroy(e); }
inline VendorError event_record(EventHandle e, StreamHandle s) { return hipEventRecord(e, s); }
inline VendorError event_synchronize(EventHandle e) { return hipEventSynchronize(e); }
inline VendorError stream_wait_event(StreamHandle s, EventHandle e) { return hipStreamWaitEvent(s, e, 0); }
inline VendorError event_elapsed(float* ms, EventHandle a, EventHandle b) { return hipEventElapsedTime(ms, a, b); }
inline VendorError host_alloc(void** p, size_t n) { return hipHostMalloc(p, n, hipHostMallocDefault); }
inline VendorError host_free(void* p) { return hipHostFree(p); }
inline VendorError to_device_async(void* d, const void* s, size_t n, StreamHandle st) {
  return hipMemcpyAsync(d, s, n, hipMemcpyHostToDevice, st);
}
inline VendorError to_host_async(void* d, const void* s, size_t n, StreamHandle st) {
  return hipMemcpyAsync(d, s, n, hipMemcpyDeviceToHost, st);
}
inline VendorError on_device_async(void* d, const void* s, size_t n, StreamHandle st) {
  return hipMemcpyAsync(d, s, n, hipMemcpyDeviceToDevice, st);
}
inline VendorError peer_async(void* d, int dd, const void* s, int sd, size_t n, StreamHandle st) {
  return hipMemcpyPeerAsync(d, dd, s, sd, n, st);
}
inline VendorError event_query(EventHandle e) { return hipEventQuery(e); }
inline bool not_ready(VendorError e) { return e == hipErrorNotReady; }
using GraphHandle = hipGraph_t;
using GraphExecHandle = hipGraphExec_t;
inline VendorError begin_capture(StreamHandle s) { return hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal); }
inline VendorError end_capture(StreamHandle s, GraphHandle* g) { return hipStreamEndCapture(s, g); }
inline VendorError instantiate(GraphExecHandle* e, GraphHandle g) { return hipGraphInstantiate(e, g, nullptr, nullptr, 0); }
inline VendorError graph_nodes(GraphHandle g, size_t* n) { return hipGraphGetNodes(g, nullptr, n); }
inline VendorError graph_launch(GraphExecHandle e, StreamHandle s) { return hipGraphLaunch(e, s); }
inline VendorError graph_exec_destroy(GraphExecHandle e) { return hipGraphExecDestroy(e); }
inline VendorError graph_destroy(GraphHandle g) { return hipGraphDestroy(g); }
inline VendorError properties(int d, DeviceProps& out) {
  hipDeviceProp_t p{};
  const VendorError e = hipGetDeviceProperties(&p, d);
  out = {p.name, p.gcnArchName, p.totalGlobalMem, p.multiProcessorCount, p.warpSize};
  return e;
}
#else
// NVTX ranges (Nsight Systems): NVTX 3 is header-only and costs a branch until a tool injects
// itself, so no library is linked.
inline void range_push(const char* name) { nvtxRangePushA(name); }
inline void range_pop() { nvtxRangePop(); }
inline VendorError device_count(int* n) { return cudaGetDeviceCount(n); }
inline VendorError set_device(int d) { return cudaSetDevice(d); }
inline VendorError get_device(int* d) { return cudaGetDevice(d); }
// cudaMalloc inside a stream capture of the default (thread-local) mode fails and invalidates the
// capture; relaxed mode permits it (the address stays valid for replays: the caching allocator
// never frees during a capture). PyTorch's allocator does the same.
inline VendorError allocate(void** p, size_t n) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  const VendorError e = cudaMalloc(p, n);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  return e;
}
inline bool out_of_memory(VendorError e) { return e == cudaErrorMemoryAllocation; }
inline VendorError release(void* p) { return cudaFree(p); }
inline VendorError to_device(void* d, const void* s, size_t n) { return cudaMemcpy(d, s, n, cudaMemcpyHostToDevice); }
inline VendorError to_host(void* d, const void* s, size_t n) { return cudaMemcpy(d, s, n, cudaMemcpyDeviceToHost); }
inline VendorError on_device(void* d, const void* s, size_t n) { return cudaMemcpy(d, s, n, cudaMemcpyDeviceToDevice); }
inline VendorError synchronize() { return cudaDeviceSynchronize(); }
inline VendorError runtime_version(int* v) { return cudaRuntimeGetVersion(v); }
using StreamHandle = cudaStream_t;
using EventHandle = cudaEvent_t;
inline VendorError stream_create(StreamHandle* s) { return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); }
inline VendorError stream_destroy(StreamHandle s) { return cudaStreamDestroy(s); }
inline VendorError stream_synchronize(StreamHandle s) { return cudaStreamSynchronize(s); }
inline VendorError event_create(EventHandle* e) { return cudaEventCreate(e); }
inline VendorError event_destroy(EventHandle e) { return cudaEventDestroy(e); }
inline VendorError event_record(EventHandle e, StreamHandle s) { return cudaEventRecord(e, s); }
inline VendorError event_synchronize(EventHandle e) { return cudaEventSynchronize(e); }
inline VendorError stream_wait_event(StreamHandle s, EventHandle e) { return cudaStreamWaitEvent(s, e, 0); }
inline VendorError event_elapsed(float* ms, EventHandle a, EventHandle b) { return cudaEventElapsedTime(ms, a, b); }
inline VendorError host_alloc(void** p, size_t n) { return cudaHostAlloc(p, n, cudaHostAllocDefault); }
inline VendorError host_free(void* p) { return cudaFreeHost(p); }
inline VendorError to_device_async(void* d, const void* s, size_t n, StreamHandle st) {
  return cudaMemcpyAsync(d, s, n, cudaMemcpyHostToDevice, st);
}
inline VendorError to_host_async(void* d, const void* s, size_t n, StreamHandle st) {
  return cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToHost, st);
}
inline VendorError on_device_async(void* d, const void* s, size_t n, StreamHandle st) {
  return cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToDevice, st);
}
inline VendorError peer_async(void* d, int dd, const void* s, int sd, size_t n, StreamHandle st) {
  return cudaMemcpyPeerAsync(d, dd, s, sd, n, st);
}
inline VendorError event_query(EventHandle e) { return cudaEventQuery(e); }
inline bool not_ready(VendorError e) { return e == cudaErrorNotReady; }
using GraphHandle = cudaGraph_t;
using GraphExecHandle = cudaGraphExec_t;
inline VendorError begin_capture(StreamHandle s) { return cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal); }
inline VendorError end_capture(StreamHandle s, GraphHandle* g) { return cudaStreamEndCapture(s, g); }
inline VendorError instantiate(GraphExecHandle* e, GraphHandle g) { return cudaGraphInstantiate(e, g, 0ULL); }
inline VendorError graph_nodes(GraphHandle g, size_t* n) { return cudaGraphGetNodes(g, nullptr, n); }
inline VendorError graph_launch(GraphExecHandle e, StreamHandle s) { return cudaGraphLaunch(e, s); }
inline VendorError graph_exec_destroy(GraphExecHandle e) { return cudaGraphExecDestroy(e); }
inline VendorError graph_destroy(GraphHandle g) { return cudaGraphDestroy(g); }
inline VendorError properties(int d, DeviceProps& out) {
  cudaDeviceProp p{};
  const VendorError e = cudaGetDeviceProperties(&p, d);
  out = {p.name, "sm_" + std::to_string(p.major * 10 + p.minor), p.totalGlobalMem, p.multiProcessorCount, p.warpSize};
  return e;
}
#endif

/**
 * The calling thread's default stream: the per-thread default stream, not the legacy null
 * stream, so host threads (the training loop, loader workers) do not serialise on one queue and
 * the default stream does not wait for every other blocking stream. Work from different host
 * threads is therefore unordered: hand a tensor to another thread after a sync or an event wait.
 */
inline StreamHandle default_stream() {
#if defined(__HIPCC__)
  return hipStreamPerThread;
#else
  return cudaStreamPerThread;
#endif
}

/** Device indices the per-thread stream table covers. */
inline constexpr int kMaxDevices = 64;

/**
 * The calling thread's current stream on `device` (StreamGuard); its default stream when none
 * is set. One per device: a stream belongs to the device it was created on, and a launch on
 * device 1 into device 0's stream fails ("invalid resource handle").
 */
inline StreamHandle& current_stream(int device) {
  struct Table {
    StreamHandle streams[kMaxDevices];
    Table() {
      for (auto& s : streams) s = default_stream();
    }
  };
  thread_local Table table;
  if (device < 0 || device >= kMaxDevices) throw Error(detail::concat("gpu: device index ", device, " out of range"));
  return table.streams[device];
}

/** The current stream on the calling thread's current device: kernels, copies and
 *  vendor-library calls of this thread are queued on it. */
inline StreamHandle& current_stream() {
  int d = 0;
  if (!ok(get_device(&d))) throw Error(detail::concat("gpu: querying the current device failed: ", error_text(last_error())));
  return current_stream(d);
}
}  // namespace vendor

TESSERA_DEVICE unsigned thread_x() { return static_cast<unsigned>(threadIdx.x); }
TESSERA_DEVICE unsigned block_x() { return static_cast<unsigned>(blockIdx.x); }
TESSERA_DEVICE unsigned block_dim_x() { return static_cast<unsigned>(blockDim.x); }
TESSERA_DEVICE unsigned grid_dim_x() { return static_cast<unsigned>(gridDim.x); }
TESSERA_DEVICE void sync_threads() { __syncthreads(); }
// __syncwarp: orders the warp's shared-memory accesses (a shuffle converges lanes but orders no
// memory). A wavefront runs in lockstep and its LDS accesses complete in order, so on AMD only
// the compiler must not move accesses across it.
#if defined(__HIPCC__)
TESSERA_DEVICE void sync_warp() { __builtin_amdgcn_wave_barrier(); }
#else
TESSERA_DEVICE void sync_warp() { __syncwarp(); }
#endif
TESSERA_DEVICE int warp_size() { return warpSize; }
TESSERA_DEVICE int lane() { return static_cast<int>(threadIdx.x) % warpSize; }
#if defined(__HIPCC__)
// HIP 5.2 has no *_sync shuffles; wavefronts execute in lock-step.
template <class T> TESSERA_DEVICE T shfl_down(T v, int d) { return __shfl_down(v, d); }
template <class T> TESSERA_DEVICE T shfl_xor(T v, int m) { return __shfl_xor(v, m); }
#else
template <class T> TESSERA_DEVICE T shfl_down(T v, int d) { return __shfl_down_sync(0xffffffffu, v, d); }
template <class T> TESSERA_DEVICE T shfl_xor(T v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
#endif
template <class T> TESSERA_DEVICE void atomic_add(T* p, T v) {
  if constexpr (sizeof(T) == 8 && !std::is_floating_point_v<T>) {
    // 64-bit integer adds are modular, so the unsigned overload gives the signed result.
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else {
    atomicAdd(p, v);
  }
}
/** Compare-and-swap on a 32-bit int; returns the old value. */
TESSERA_DEVICE int atomic_cas(int* p, int expected, int desired) { return atomicCAS(p, expected, desired); }
template <class T> TESSERA_DEVICE T* dynamic_shared() {
  extern __shared__ unsigned char tessera_dynamic_shared[];
  return reinterpret_cast<T*>(tessera_dynamic_shared);
}
#define TESSERA_SHARED_ARRAY(T, name, count) __shared__ T name[count]
// 16-byte aligned, for kernels that copy whole 16-byte chunks or read 32-bit words of 16-bit
// arrays (not the default: the alignment changes ptxas's register allocation of unrelated kernels).
#define TESSERA_SHARED_ARRAY16(T, name, count) __shared__ __align__(16) T name[count]
#define TESSERA_UNROLL _Pragma("unroll")
#else
// Built-in indices are registers on a GPU: reading the emulator's state for them must not count
// as global memory traffic (access_counters.h), so these are left uninstrumented.
#define TESSERA_EMU_BUILTIN __attribute__((no_sanitize("thread")))
TESSERA_EMU_BUILTIN inline unsigned thread_x() { return emu::current().thread_idx.x; }
TESSERA_EMU_BUILTIN inline unsigned block_x() { return emu::current().block_idx.x; }
TESSERA_EMU_BUILTIN inline unsigned block_dim_x() { return emu::current().block_dim.x; }
TESSERA_EMU_BUILTIN inline unsigned grid_dim_x() { return emu::current().grid_dim.x; }
inline void sync_threads(std::source_location where = std::source_location::current()) { emu::sync_threads(where); }
inline void sync_warp(std::source_location where = std::source_location::current()) { emu::sync_warp(where); }
TESSERA_EMU_BUILTIN inline int warp_size() { return emu::settings().warp_size; }
TESSERA_EMU_BUILTIN inline int lane() { return emu::lane_id(); }
template <class T> uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8);
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <class T> T from_bits(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof(T));
  return v;
}
template <class T> T shfl_down(T v, int d, std::source_location w = std::source_location::current()) {
  return from_bits<T>(emu::shuffle_down(to_bits(v), d, w));
}
template <class T> T shfl_xor(T v, int m, std::source_location w = std::source_location::current()) {
  return from_bits<T>(emu::shuffle_xor(to_bits(v), m, w));
}
// Blocks run on several host threads at once, so device atomics must be real atomics.
template <class T> void atomic_add(T* p, T v) { std::atomic_ref<T>(*p).fetch_add(v, std::memory_order_relaxed); }
inline int atomic_cas(int* p, int expected, int desired) {
  std::atomic_ref<int>(*p).compare_exchange_strong(expected, desired, std::memory_order_relaxed);
  return expected;
}
template <class T> T* dynamic_shared() { return reinterpret_cast<T*>(emu::dynamic_shared()); }
#define TESSERA_SHARED_ARRAY(T, name, count)   \
  static const char name##_site = 0;           \
  T* name = reinterpret_cast<T*>(::tessera::emu::static_shared(&name##_site, sizeof(T) * (count)))
#define TESSERA_SHARED_ARRAY16(T, name, count) TESSERA_SHARED_ARRAY(T, name, count)  // static_shared: 16-byte offsets
#define TESSERA_UNROLL
#endif

TESSERA_DEVICE int64_t global_index() { return static_cast<int64_t>(block_x()) * block_dim_x() + thread_x(); }
TESSERA_DEVICE int64_t grid_stride() { return static_cast<int64_t>(grid_dim_x()) * block_dim_x(); }

/**
 * A 16-byte copy from global to shared memory that may complete asynchronously (cp.async on
 * sm_80+, so the loads of the next tile overlap the math on this one; a plain copy on older
 * GPUs, AMD and the emulator): its data is the block's after async_copy_wait<N>() (at most N
 * newer committed groups still in flight) and a barrier. `valid` false writes zeros and reads
 * nothing (`gmem` must still be a device address). Both addresses 16-byte aligned.
 */
TESSERA_DEVICE void async_copy16(void* smem, const void* gmem, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(smem))), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
#else
  struct alignas(16) Chunk {
    uint32_t w[4];
  };
  *static_cast<Chunk*>(smem) = valid ? *static_cast<const Chunk*>(gmem) : Chunk{};
#endif
}
/** Closes the group of async_copy16 calls issued since the last commit. */
TESSERA_DEVICE void async_copy_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
/** Waits until at most N of this thread's committed groups are in flight. */
template <int N>
TESSERA_DEVICE void async_copy_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/** Launches `kernel` on the calling thread's current stream; throws on launch failure. */
template <class... KArgs, class... Args>
void launch(void (*kernel)(KArgs...), Grid grid, Grid block, size_t shared_bytes, bool cooperative, Args... args) {
#if defined(__CUDACC__) || defined(__HIPCC__)
  (void)cooperative;
#if defined(__HIPCC__)
  clear_stale_error(hipErrorNotReady);
#else
  clear_stale_error(cudaErrorNotReady);
#endif
  kernel<<<dim3(grid.x, grid.y, grid.z), dim3(block.x, block.y, block.z), shared_bytes, vendor::current_stream()>>>(
      static_cast<KArgs>(args)...);
  check_launch();
#else
  // The vendor's own limits first (their messages name the vendor), then the kernels' bound.
  emu::check_launch_limits({grid.x, grid.y, grid.z}, {block.x, block.y, block.z}, shared_bytes, emu::settings().limits);
  if (uint64_t{block.x} * block.y * block.z > kMaxBlockThreads) {
    throw Error(detail::concat("emulated: too many resources requested for launch: a block of ", uint64_t{block.x} * block.y * block.z,
                               " threads exceeds the kernels' launch bound of ", kMaxBlockThreads));
  }
  // Every pointer argument must be memory of the current device (or not device memory at all).
  const auto check = []<class A>(const A& a) {
    if constexpr (std::is_pointer_v<A>) emu::check_argument(static_cast<const void*>(a));
  };
  (check(args), ...);
  // By value: on an emulated user stream the launch runs later, like a queued GPU kernel. The
  // arguments are read from the closure before kernel_entry (parameter space, not global memory).
  // Like the hardware path: an error latched by an earlier call is not this launch's.
  emu::clear_stale_error();
  emu::launch([=] { emu::enter_kernel(kernel, static_cast<KArgs>(args)...); }, {grid.x, grid.y, grid.z},
              {block.x, block.y, block.z}, shared_bytes, cooperative, reinterpret_cast<const void*>(kernel));
  emu::check_launch();
#endif
}

}  // namespace tessera::gpu
