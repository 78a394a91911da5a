#include "execution.h"

#include <pthread.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <boost/context/fiber.hpp>
#include <boost/context/pooled_fixedsize_stack.hpp>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "access_counters.h"
#include "streams.h"
#include "tessera/error.h"

// ThreadSanitizer: each GPU thread is a TSan fiber and the switches carry no synchronisation,
// so TSan sees the kernel's threads as unordered except where the execution model orders them:
// a barrier (release before waiting, acquire after) and a warp exchange (per warp). A kernel
// missing a __syncthreads then shows up as a data race on shared or global memory. The
// emulator's own bookkeeping between the scheduler and the fibers is excluded from tracking.
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
extern "C" {
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}
#define TESSERA_EMU_TSAN 1
#endif
// AddressSanitizer: an exception thrown on a fiber (a kernel's error, Boost's forced unwind of a
// suspended fiber) unwinds frames whose stack redzones ASan cannot clear, because it does not
// know the fiber's stack (it warns "ignoring requested __asan_handle_no_return"). The stale
// poison then trips the next frames built there: a rethrow, or the next fiber given the pooled
// stack. The dead part of the stack is unpoisoned by hand at those two points.
#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSERA_EMU_ASAN 1
#endif
#endif
#if TESSERA_EMU_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace tessera::emu {

namespace ctx = boost::context;

namespace {
constexpr size_t kRedzone = 64;
constexpr unsigned char kPoison = 0xFF;     // NaN for f32/f64/f16 and -1 for integers
constexpr unsigned char kRedzoneByte = 0xCD;
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kStackSize = 256 * 1024;
#else
constexpr size_t kStackSize = 64 * 1024;
#endif

enum class Wait { running, barrier, warp, done };

struct Fiber;
struct Block;

struct Fiber {
  ctx::fiber self, caller;
  ThreadState state;
  Block* block = nullptr;
  int tid = 0;
  Wait wait = Wait::running;
  std::source_location site;
  const char *stack_lo = nullptr, *stack_hi = nullptr;  // for the access counters: locals are not global memory
  uint64_t shuffle_count = 0, barrier_count = 0;
  std::exception_ptr error;
#if TESSERA_EMU_TSAN
  void* tsan = nullptr;
  ~Fiber() {
    if (tsan) __tsan_destroy_fiber(tsan);
  }
#endif
};

struct Block {
  std::vector<std::unique_ptr<Fiber>> threads;
  std::vector<char> arena;            // [redzone][dynamic][redzone]([static][redzone])*
  size_t dynamic_bytes = 0;
  std::map<const void*, std::pair<size_t, size_t>> static_arrays;  // key -> (offset, bytes)
  std::vector<uint64_t> slots[2];     // warp shuffle exchange, double-buffered by parity
#if TESSERA_EMU_TSAN
  void* scheduler = nullptr;          // TSan context of the OS thread running the block
  // Sync addresses alternate by generation parity: a thread that already arrived at the next
  // barrier must not hand its writes to one still waking from the previous one.
  char barrier_sync[2] = {}, start_sync = 0, done_sync = 0;
  std::vector<char> warp_sync;        // two per warp, by exchange parity
#endif
};

#if TESSERA_EMU_TSAN
/** Untracked accesses for the emulator's bookkeeping (not the kernel's memory). */
void ignore_begin() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__), AnnotateIgnoreWritesBegin(__FILE__, __LINE__); }
void ignore_end() { AnnotateIgnoreReadsEnd(__FILE__, __LINE__), AnnotateIgnoreWritesEnd(__FILE__, __LINE__); }
struct Untracked {
  Untracked() { ignore_begin(); }
  ~Untracked() { ignore_end(); }
};
#define TESSERA_EMU_UNTRACKED const Untracked tessera_untracked_
#else
#define TESSERA_EMU_UNTRACKED
#endif

// A pooled fiber stack that tells its fiber where it lies.
struct TrackedStack {
  ctx::pooled_fixedsize_stack pool;
  Fiber* fiber;
  ctx::stack_context allocate() {
    ctx::stack_context sc = pool.allocate();
    fiber->stack_hi = static_cast<const char*>(sc.sp);
    fiber->stack_lo = fiber->stack_hi - sc.size;
#if TESSERA_EMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(fiber->stack_lo, sc.size);  // poison left by the stack's last fiber
#endif
    return sc;
  }
  void deallocate(ctx::stack_context& sc) noexcept { pool.deallocate(sc); }
};

// After an exception was caught on a fiber: the unwound frames lie below the catching one.
[[gnu::always_inline]] inline void unpoison_unwound_frames([[maybe_unused]] const Fiber& f) {
#if TESSERA_EMU_ASAN
  const char* here = static_cast<const char*>(__builtin_frame_address(0));
  if (here > f.stack_lo && here <= f.stack_hi) ASAN_UNPOISON_MEMORY_REGION(f.stack_lo, static_cast<size_t>(here - f.stack_lo));
#endif
}

// The calling OS thread's stack (plain, non-cooperative threads run on it).
std::pair<const char*, const char*> os_thread_stack() {
  thread_local std::pair<const char*, const char*> range = [] {
    pthread_attr_t attr;
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      pthread_attr_getstack(&attr, &addr, &size);
      pthread_attr_destroy(&attr);
    }
    return std::make_pair(static_cast<const char*>(addr), static_cast<const char*>(addr) + size);
  }();
  return range;
}

std::atomic<const char* (*)()> g_label_source{nullptr};

thread_local Fiber* t_fiber = nullptr;
thread_local ThreadState t_plain;  // state of a non-cooperative thread

std::string where_str(const std::source_location& s) { return std::string(s.file_name()) + ":" + std::to_string(s.line()); }

// A fiber's TSan context ignores accesses while it is suspended: Boost's switch code reads and
// writes the fiber handles in whichever context TSan believes is current.
void yield(Fiber& f) {
#if TESSERA_EMU_TSAN
  ignore_begin();
  __tsan_switch_to_fiber(f.block->scheduler, __tsan_switch_to_fiber_no_sync);
#endif
  f.caller = std::move(f.caller).resume();
#if TESSERA_EMU_TSAN
  ignore_end();
#endif
}

void check_redzones(const Block& b) {
  const auto bad = [&](size_t off) {
    for (size_t i = 0; i < kRedzone; ++i) {
      if (static_cast<unsigned char>(b.arena[off + i]) != kRedzoneByte) return true;
    }
    return false;
  };
  bool corrupt = bad(0) || bad(kRedzone + b.dynamic_bytes);
  for (const auto& [key, a] : b.static_arrays) corrupt = corrupt || bad(a.first - kRedzone) || bad(a.first + a.second);
  if (corrupt) throw Error("emulated: a kernel wrote outside its shared memory (redzone overwritten)");
}

std::vector<int> order(int n, uint64_t round) {
  std::vector<int> o(static_cast<size_t>(n));
  std::iota(o.begin(), o.end(), 0);
  switch (settings().schedule) {
    case Schedule::forward: break;
    case Schedule::reverse: std::reverse(o.begin(), o.end()); break;
    case Schedule::random: {
      std::mt19937_64 rng(settings().seed * 0x9E3779B97F4A7C15ULL + round);
      std::shuffle(o.begin(), o.end(), rng);
      break;
    }
  }
  return o;
}

// Runs every fiber of the block until all finish, releasing barriers when every live thread
// waits at one, and warp exchanges when every lane of the warp arrived.
void run_block(Block& b) {
  const int n = static_cast<int>(b.threads.size());
  const int warp = settings().warp_size;
#if TESSERA_EMU_TSAN
  b.scheduler = __tsan_get_current_fiber();
  b.warp_sync.assign(static_cast<size_t>(2 * ((n + warp - 1) / warp)), 0);
  __tsan_release(&b.start_sync);  // the arena's poison and the threads' state, set up above
#endif
  TESSERA_EMU_UNTRACKED;  // the scheduler only touches bookkeeping while fibers are suspended
  uint64_t round = 0;
  for (;;) {
    bool progressed = false;
    for (int i : order(n, round++)) {
      Fiber& f = *b.threads[i];
      if (f.wait != Wait::running) continue;
      t_fiber = &f;
      access::set_thread(f.tid, f.stack_lo, f.stack_hi);
#if TESSERA_EMU_TSAN
      __tsan_switch_to_fiber(f.tsan, __tsan_switch_to_fiber_no_sync);
#endif
      f.self = std::move(f.self).resume();
      access::set_thread(-1);
      t_fiber = nullptr;
      if (f.error) std::rethrow_exception(f.error);
      progressed = true;
    }
    // Release warp exchanges whose lanes all arrived.
    for (int w0 = 0; w0 < n; w0 += warp) {
      const int w1 = std::min(n, w0 + warp);
      int waiting = 0, done = 0;
      for (int t = w0; t < w1; ++t) {
        waiting += b.threads[t]->wait == Wait::warp;
        done += b.threads[t]->wait == Wait::done;
      }
      if (waiting > 0 && waiting + done == w1 - w0) {
        if (done > 0) {
          throw Error("emulated: warp shuffle at " + where_str(b.threads[w0]->site) + " reached by " +
                      std::to_string(waiting) + " lanes while " + std::to_string(done) + " lanes of the warp had exited");
        }
        for (int t = w0; t < w1; ++t) b.threads[t]->wait = Wait::running;
        progressed = true;
      }
    }
    int live = 0, at_barrier = 0, at_warp = 0;
    for (auto& f : b.threads) {
      live += f->wait != Wait::done;
      at_barrier += f->wait == Wait::barrier;
      at_warp += f->wait == Wait::warp;
    }
    if (live == 0) return;
    if (at_barrier == live) {
      const Fiber* first = nullptr;
      for (auto& f : b.threads) {
        if (f->wait != Wait::barrier) continue;
        if (!first) first = f.get();
        else if (f->site.line() != first->site.line() ||
                 (f->site.file_name() != first->site.file_name() && std::strcmp(f->site.file_name(), first->site.file_name()) != 0)) {
          throw Error("emulated: threads of one block wait at different barriers: " + where_str(first->site) + " and " +
                      where_str(f->site));
        }
      }
      if (live < n) {
        throw Error("emulated: deadlock: barrier at " + where_str(first->site) + " reached by " + std::to_string(live) +
                    " of " + std::to_string(n) + " threads; the others have exited");
      }
      for (auto& f : b.threads) f->wait = Wait::running;
      continue;
    }
    if (!progressed) {
      std::string sites;
      for (auto& f : b.threads) {
        if (f->wait == Wait::barrier || f->wait == Wait::warp) {
          sites = where_str(f->site);
          break;
        }
      }
      throw Error("emulated: deadlock: " + std::to_string(at_barrier) + " threads at a barrier and " + std::to_string(at_warp) +
                  " at a warp shuffle (" + sites + ") can never all arrive");
    }
  }
}
}  // namespace

Settings& settings() {
  static Settings s = [] {
    Settings v;
    if (const char* w = std::getenv("TESSERA_EMU_WARP")) v.warp_size = std::atoi(w) == 64 ? 64 : 32;
    if (const char* l = std::getenv("TESSERA_EMU_LIMITS")) {
      const std::string str(l);
      v.limits = str == "cuda" ? LaunchLimits::cuda : str == "hip" ? LaunchLimits::hip : LaunchLimits::both;
    }
    if (const char* sc = std::getenv("TESSERA_EMU_SCHEDULE")) {
      const std::string str(sc);
      if (str == "reverse") v.schedule = Schedule::reverse;
      else if (str.rfind("random", 0) == 0) {
        v.schedule = Schedule::random;
        if (str.size() > 7) v.seed = std::strtoull(str.c_str() + 7, nullptr, 10);
      }
    }
    return v;
  }();
  return s;
}

const ThreadState& current() { return t_fiber ? t_fiber->state : t_plain; }

void check_launch_limits(Dim3 grid, Dim3 block, size_t dynamic_shared, LaunchLimits limits) {
  const auto dims = [](Dim3 d) { return detail::concat("(", d.x, ", ", d.y, ", ", d.z, ")"); };
  const std::string what = "grid " + dims(grid) + " x block " + dims(block);
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  TESSERA_CHECK(threads >= 1 && threads <= 1024 && block.x <= 1024 && block.y <= 1024 && block.z <= 64, "launch", what,
                ": a block holds 1..1024 threads with x, y <= 1024 and z <= 64");
  TESSERA_CHECK(grid.x >= 1 && grid.y >= 1 && grid.z >= 1, "launch", what, ": a grid dimension is 0");
  TESSERA_CHECK(dynamic_shared <= kSharedMemoryLimit, "launch", what, ": ", dynamic_shared, " bytes of dynamic shared memory exceed ",
                kSharedMemoryLimit, " (the limit without an opt-in)");
  if (limits != LaunchLimits::hip) {
    TESSERA_CHECK(grid.x <= 0x7FFFFFFFu && grid.y <= 65535 && grid.z <= 65535, "launch", what,
                  ": exceeds CUDA's grid limits (x < 2^31, y and z <= 65535)");
  }
  if (limits != LaunchLimits::cuda) {
    const auto over = [](unsigned g, unsigned b) { return uint64_t{g} * b >= (uint64_t{1} << 32); };
    TESSERA_CHECK(!over(grid.x, block.x) && !over(grid.y, block.y) && !over(grid.z, block.z), "launch", what,
                  ": exceeds HIP's limit of grid x block < 2^32 work-items per dimension");
  }
}

namespace {
std::atomic<int64_t> g_launches{0}, g_blocks{0}, g_max_blocks{0};
}  // namespace

LaunchStats launch_stats() { return {g_launches.load(), g_blocks.load(), g_max_blocks.load()}; }
void reset_launch_stats() { g_launches = 0, g_blocks = 0, g_max_blocks = 0; }

namespace {
// Runs every thread of every block of one launch (now: the launch was checked and queued).
void execute(const std::function<void()>& body, Dim3 grid, Dim3 block, size_t dynamic_shared, bool cooperative, const char* label,
             const void* kernel) {
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  const int threads = static_cast<int>(block.x * block.y * block.z);
  access::begin_launch(label, kernel, blocks, threads);
  auto block_state = [&](uint64_t bi) {
    ThreadState s;
    s.grid_dim = grid;
    s.block_dim = block;
    s.block_idx = {static_cast<unsigned>(bi % grid.x), static_cast<unsigned>((bi / grid.x) % grid.y),
                   static_cast<unsigned>(bi / (uint64_t{grid.x} * grid.y))};
    return s;
  };
  auto thread_idx = [&](int t) {
    return Dim3{static_cast<unsigned>(t % block.x), static_cast<unsigned>((t / block.x) % block.y),
                static_cast<unsigned>(t / (block.x * block.y))};
  };
  tbb::parallel_for(tbb::blocked_range<uint64_t>(0, blocks), [&](const tbb::blocked_range<uint64_t>& r) {
    if (!cooperative) {
      const auto [stack_lo, stack_hi] = os_thread_stack();
      for (uint64_t bi = r.begin(); bi < r.end(); ++bi) {
        t_plain = block_state(bi);
        access::begin_block(threads, nullptr, nullptr);
        for (int t = 0; t < threads; ++t) {
          t_plain.thread_idx = thread_idx(t);
          access::set_thread(t, stack_lo, stack_hi);
          body();
        }
        access::set_thread(-1);
        access::end_block(settings().warp_size);
      }
      return;
    }
    ctx::pooled_fixedsize_stack stacks(kStackSize);
    for (uint64_t bi = r.begin(); bi < r.end(); ++bi) {
      Block b;
      b.dynamic_bytes = dynamic_shared;
      b.arena.assign(2 * kRedzone + dynamic_shared, static_cast<char>(kPoison));
      std::memset(b.arena.data(), kRedzoneByte, kRedzone);
      std::memset(b.arena.data() + kRedzone + dynamic_shared, kRedzoneByte, kRedzone);
      b.arena.reserve(b.arena.size() + 64 * 1024);  // static arrays are appended without moving
      b.slots[0].assign(static_cast<size_t>(threads), 0);
      b.slots[1].assign(static_cast<size_t>(threads), 0);
      for (int t = 0; t < threads; ++t) {
        auto f = std::make_unique<Fiber>();
        f->state = block_state(bi);
        f->state.thread_idx = thread_idx(t);
        f->block = &b;
        f->tid = t;
        Fiber* fp = f.get();
#if TESSERA_EMU_TSAN
        f->tsan = __tsan_create_fiber(0);
        void* scheduler = __tsan_get_current_fiber();
        __tsan_switch_to_fiber(f->tsan, __tsan_switch_to_fiber_no_sync);  // no stack switch: only
        ignore_begin();                                                   // marks the new fiber
        __tsan_switch_to_fiber(scheduler, __tsan_switch_to_fiber_no_sync);  // suspended
#endif
        f->self = ctx::fiber(std::allocator_arg, TrackedStack{stacks, fp}, [fp, &body](ctx::fiber&& caller) {
          fp->caller = std::move(caller);
#if TESSERA_EMU_TSAN
          char* start = &fp->block->start_sync;  // read while still untracked: the acquire below
          ignore_end();                          // is what orders the scheduler's set-up before us
          __tsan_acquire(start);
#endif
          try {
            body();
          } catch (const ctx::detail::forced_unwind&) {
            unpoison_unwound_frames(*fp);
            throw;  // a suspended fiber being destroyed after an error: let Boost unwind it
          } catch (...) {
            unpoison_unwound_frames(*fp);
            fp->error = std::current_exception();
          }
          {
            TESSERA_EMU_UNTRACKED;
            fp->wait = Wait::done;
          }
#if TESSERA_EMU_TSAN
          {
            // Nothing of the block may be touched after the release: the scheduler frees it.
            void* scheduler = fp->block->scheduler;
            __tsan_release(&fp->block->done_sync);
            // From here Boost's code runs as the scheduler, which ignores bookkeeping accesses.
            __tsan_switch_to_fiber(scheduler, __tsan_switch_to_fiber_no_sync);
          }
#endif
          return std::move(fp->caller);
        });
        b.threads.push_back(std::move(f));
      }
      access::begin_block(threads, b.arena.data(), b.arena.data() + b.arena.capacity(), label, settings().warp_size);
      run_block(b);
      access::end_block(settings().warp_size);
#if TESSERA_EMU_TSAN
      __tsan_acquire(&b.done_sync);
#endif
      check_redzones(b);
    }
  });
  access::end_launch();
}

}  // namespace

void set_label_source(const char* (*source)()) { g_label_source = source; }

void launch(const std::function<void()>& body, Dim3 grid, Dim3 block, size_t dynamic_shared, bool cooperative, const void* kernel) {
  check_launch_limits(grid, block, dynamic_shared, settings().limits);
  const auto blocks = static_cast<int64_t>(uint64_t{grid.x} * grid.y * grid.z);
  ++g_launches;
  g_blocks += blocks;
  for (int64_t m = g_max_blocks.load(); m < blocks && !g_max_blocks.compare_exchange_weak(m, blocks);) {
  }
  // A launch on a user stream waits in its queue (streams.h); on the default stream it runs now.
  const auto source = g_label_source.load();
  const char* label = source ? source() : nullptr;  // the op launching it (string literals live forever)
  submit(current_queue(current_device()), [body, grid, block, dynamic_shared, cooperative, label, kernel] {
    execute(body, grid, block, dynamic_shared, cooperative, label, kernel);
  });
}

void sync_threads(std::source_location where) {
  Fiber* f = t_fiber;
  if (!f) throw Error("emulated: __syncthreads at " + where_str(where) + " in a kernel launched without cooperative threads");
  {
    TESSERA_EMU_UNTRACKED;
    f->wait = Wait::barrier;
    f->site = where;
  }
#if TESSERA_EMU_TSAN
  char* sync = &f->block->barrier_sync[f->barrier_count++ & 1];
  __tsan_release(sync);
#endif
  yield(*f);
#if TESSERA_EMU_TSAN
  __tsan_acquire(sync);
#endif
  access::barrier_passed();
}

int lane_id() {
  const ThreadState& s = current();
  const unsigned tid = s.thread_idx.x + s.block_dim.x * (s.thread_idx.y + s.block_dim.y * s.thread_idx.z);
  return static_cast<int>(tid % static_cast<unsigned>(settings().warp_size));
}

namespace {
// Publishes `value`, waits for every lane of the warp, then reads the value of lane `src`
// (src outside the warp reads the caller's own value, like CUDA).
uint64_t exchange(uint64_t value, int src, std::source_location where, uint64_t* gather_out = nullptr) {
  Fiber* f = t_fiber;
  if (!f) throw Error("emulated: warp shuffle at " + where_str(where) + " in a kernel launched without cooperative threads");
  Block& b = *f->block;
  const int warp = settings().warp_size;
  const int base = f->tid - f->tid % warp;
  const int width = std::min<int>(warp, static_cast<int>(b.threads.size()) - base);
  const uint64_t parity = f->shuffle_count++ & 1;
  auto& slot = b.slots[parity];
  {
    TESSERA_EMU_UNTRACKED;  // the exchange itself is the synchronisation
    slot[static_cast<size_t>(f->tid)] = value;
    f->wait = Wait::warp;
    f->site = where;
  }
#if TESSERA_EMU_TSAN
  char* sync = &b.warp_sync[static_cast<size_t>(2 * (base / warp) + parity)];
  __tsan_release(sync);
#endif
  yield(*f);
#if TESSERA_EMU_TSAN
  __tsan_acquire(sync);
#endif
  TESSERA_EMU_UNTRACKED;
  if (gather_out) {
    if (width != warp) {
      throw Error("emulated: warp-collective matrix operation at " + where_str(where) + " in a partial warp of " +
                  std::to_string(width) + " lanes (needs all " + std::to_string(warp) + ")");
    }
    for (int l = 0; l < width; ++l) gather_out[l] = slot[static_cast<size_t>(base + l)];
  }
  return (src >= 0 && src < width) ? slot[static_cast<size_t>(base + src)] : value;
}
}  // namespace

void warp_gather(uint64_t value, uint64_t* out, std::source_location where) { exchange(value, -1, where, out); }

uint64_t shuffle(uint64_t value, int src_lane, std::source_location where) { return exchange(value, src_lane, where); }
void sync_warp(std::source_location where) {
  exchange(0, -1, where);
  access::warp_barrier_passed();
}
uint64_t shuffle_down(uint64_t value, int delta, std::source_location where) {
  const int lane = lane_id();
  return exchange(value, lane + delta < settings().warp_size ? lane + delta : -1, where);
}
uint64_t shuffle_xor(uint64_t value, int mask, std::source_location where) { return exchange(value, lane_id() ^ mask, where); }

char* dynamic_shared() {
  Fiber* f = t_fiber;
  if (!f) throw Error("emulated: shared memory used in a kernel launched without cooperative threads");
  return f->block->arena.data() + kRedzone;
}

char* static_shared(const void* key, size_t bytes) {
  Fiber* f = t_fiber;
  if (!f) throw Error("emulated: shared memory used in a kernel launched without cooperative threads");
  Block& b = *f->block;
  TESSERA_EMU_UNTRACKED;  // allocation and poisoning are the emulator's, not the kernel's
  auto it = b.static_arrays.find(key);
  if (it == b.static_arrays.end()) {
    const size_t off = (b.arena.size() + kRedzone + 15) / 16 * 16;
    size_t used = b.dynamic_bytes + bytes;
    for (const auto& [k, a] : b.static_arrays) used += a.second;
    TESSERA_CHECK(used <= kSharedMemoryLimit && off + bytes + kRedzone <= b.arena.capacity(), "emulated", "shared memory of ", used,
                  " bytes (static + dynamic) exceeds ", kSharedMemoryLimit);
    b.arena.resize(off, static_cast<char>(kRedzoneByte));
    b.arena.resize(off + bytes, static_cast<char>(kPoison));
    b.arena.resize(off + bytes + kRedzone, static_cast<char>(kRedzoneByte));
    it = b.static_arrays.emplace(key, std::make_pair(off, bytes)).first;
  }
  return b.arena.data() + it->second.first;
}

}  // namespace tessera::emu
