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
inline constexpr const char* kVendorDevice = "hip";  // the device type's name in messages
inline bool ok(VendorError e) { return e == hipSuccess; }
inline const char* error_text(VendorError e) { return hipGetErrorString(e); }
inline VendorError last_error() { return hipGetLastError(); }
#else
using VendorError = cudaError_t;
inline constexpr const char* kVendorDevice = "cuda";
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
/** Whether this compilation pass has sm_80's warp matrix instructions (mma.sync m16n8k16,
 *  ldmatrix, cvt.rn.{bf16,f16}x2): per pass, so false on the host, older targets, AMD and the
 *  emulator. The wrappers below exist in every pass; only kernels under this flag call them. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
inline constexpr bool kHasMmaSync = true;
#else
inline constexpr bool kHasMmaSync = false;
#endif
/** Two 16-bit elements at p (4-byte aligned, shared memory) as one word, low address low. */
TESSERA_DEVICE uint32_t load_u16_pair(const uint16_t* p) {
#if defined(__CUDACC__) || defined(__HIPCC__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t w;
  std::memcpy(&w, p, sizeof w);  // the host compiler's aliasing rules: no uint32_t view of uint16_t storage
  return w;
#endif
}
/** c += a b by one mma.sync.m16n8k16 (f32 accumulators, bf16 or f16 operands as packed words). */
template <bool kBf16>
TESSERA_DEVICE void mma_sync_16x8x16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kBf16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#else
  (void)c, (void)a, (void)b;
#if defined(__CUDA_ARCH__)
  __trap();  // pre-Ampere device code: the host side chose the SIMT path; reaching here is a dispatch bug
#endif
#endif
}
/** Two floats rounded to nearest-even bf16 (or f16) in one word, lo in the low half. */
template <bool kBf16>
TESSERA_DEVICE uint32_t cvt_pack2_rn(float lo, float hi) {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kBf16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));  // the first source goes to the upper half
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
#else
  (void)lo, (void)hi;
#endif
  return r;
}
/** ldmatrix.x2.trans: lanes 0-15 give the addresses of 16 rows of 8 16-bit elements (16-byte
 *  aligned, shared memory); lane l receives, of the 16 x 8 tile, elements [(l % 4) * 2 + {0, 1}][l / 4]
 *  in w0 and the same 8 rows further in w1 - the mma.sync B fragment of a k-major tile. */
TESSERA_DEVICE void ldmatrix_x2_trans(uint32_t& w0, uint32_t& w1, const uint16_t* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(w0), "=r"(w1) : "r"(addr));
#else
  (void)row;
  w0 = w1 = 0;
#endif
}
/** c += a b by one MFMA 16x16x16 (CDNA: gfx90a, gfx94x; bf16 or f16 operands as raw bits). Elsewhere
 *  in AMD device code it traps (no matrix cores, RDNA: the host side chose the SIMT path). */
template <bool kBf16>
TESSERA_DEVICE void mfma_16x16x16(float (&c)[4], const uint16_t (&a)[4], const uint16_t (&b)[4]) {
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
  typedef float float4_t __attribute__((ext_vector_type(4)));
  typedef short short4_t __attribute__((ext_vector_type(4)));
  typedef _Float16 half4_t __attribute__((ext_vector_type(4)));
  float4_t acc = {c[0], c[1], c[2], c[3]};
  short4_t as, bs;
  for (int i = 0; i < 4; ++i) as[i] = static_cast<short>(a[i]), bs[i] = static_cast<short>(b[i]);
  if constexpr (kBf16) {
    acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(as, bs, acc, 0, 0, 0);
  } else {
    acc = __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(half4_t, as), __builtin_bit_cast(half4_t, bs), acc, 0, 0, 0);
  }
  for (int i = 0; i < 4; ++i) c[i] = acc[i];
#else
  (void)c, (void)a, (void)b;
#if defined(__HIP_DEVICE_COMPILE__)
  __builtin_trap();
#endif
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

/** SMs (CUs) of the current device, for sizing launches; the emulator models 8. */
inline int device_units() {
#if defined(__CUDACC__) || defined(__HIPCC__)
  thread_local int cached_device = -1, cached = 1;
  int d = 0;
  TESSERA_GPU_CHECK(vendor::get_device(&d));
  if (d != cached_device) {
    DeviceProps p;
    TESSERA_GPU_CHECK(vendor::properties(d, p));
    cached = p.units > 0 ? p.units : 1;
    cached_device = d;
  }
  return cached;
#else
  return 8;
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
