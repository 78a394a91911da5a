#include "access_counters.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "tessera/backend/modules.h"
#include "tessera/error.h"

namespace tessera::emu::access {
namespace {

constexpr uintptr_t kSector = 32;

struct Access {
  uintptr_t addr;
  const void* pc;
  uint32_t size;
  bool write;
};

// The racecheck shadow of one shared-memory byte: its last writer and its readers since then.
// A reader set is summarised: the warp they all belong to (-1: several warps), the highest
// __syncwarp count among them and who read at that count (-2: several threads).
struct Shadow {
  int32_t w_tid = -1, w_bar = 0, w_wbar = 0;
  int32_t r_bar = -1, r_warp = 0, r_wbar = 0, r_cur = -1;
  const void* w_pc = nullptr;
  const void* r_pc = nullptr;
};

// One host thread's view of the block it is running.
struct BlockTrace {
  std::vector<std::vector<Access>> lanes;  // per GPU thread of the block
  std::vector<char> armed;                 // the thread has entered the kernel body
  uintptr_t shared_begin = 0, shared_end = 0, stack_lo = 0, stack_hi = 0;
  int tid = -1;
  bool active = false, counting = false;
  // Racecheck: barriers passed per thread, the shadow of the touched bytes, the first conflict.
  bool checking = false;
  int warp_size = 32;
  const char* label = nullptr;
  std::vector<int32_t> bars, wbars;
  std::unordered_map<uintptr_t, Shadow> shadow;
  std::string conflict;
};
thread_local BlockTrace t_block;
std::atomic<bool> g_racecheck{[] {
  const char* e = std::getenv("TESSERA_EMU_RACECHECK");
  return e && std::strcmp(e, "0") != 0;
}()};

std::string where(const void* pc) {  // "function (library+0xoffset)", for addr2line
  Dl_info info{};
  if (!pc || !dladdr(pc, &info) || !info.dli_fname) return "?";
  const char* lib = std::strrchr(info.dli_fname, '/');
  char off[32];
  std::snprintf(off, sizeof off, "+0x%zx", static_cast<size_t>(reinterpret_cast<uintptr_t>(pc) - reinterpret_cast<uintptr_t>(info.dli_fbase)));
  return std::string(info.dli_sname ? info.dli_sname : "?") + " (" + (lib ? lib + 1 : info.dli_fname) + off + ")";
}

// Checks one byte's access by the running thread against its shadow, then records it.
void check_shared_byte(BlockTrace& b, uintptr_t addr, bool write, const void* pc) {
  const int t = b.tid, bar = b.bars[static_cast<size_t>(t)], wbar = b.wbars[static_cast<size_t>(t)], warp = t / b.warp_size;
  Shadow& s = b.shadow[addr];
  auto report = [&](const char* kind, int other, const void* other_pc) {
    if (!b.conflict.empty()) return;
    b.conflict = detail::concat("emulated racecheck: ", kind, " hazard on shared memory byte +", addr - b.shared_begin, " in ",
                                b.label ? b.label : "a kernel", ": ", other >= 0 ? "thread " + std::to_string(other) : std::string("several threads"),
                                " at ", where(other_pc), " and thread ", t, " at ",
                                where(pc), " with no __syncthreads", other >= 0 && other / b.warp_size == warp ? " or __syncwarp" : "", " between them");
  };
  // The last write conflicts with this access unless a barrier separates them.
  if (s.w_tid >= 0 && s.w_tid != t && s.w_bar == bar && (s.w_tid / b.warp_size != warp || s.w_wbar == wbar)) {
    report(write ? "write-after-write" : "read-after-write", s.w_tid, s.w_pc);
  }
  if (!write) {
    if (s.r_bar != bar) {
      s.r_bar = bar, s.r_warp = warp, s.r_wbar = wbar, s.r_cur = t, s.r_pc = pc;
    } else {
      if (s.r_warp != warp) s.r_warp = -1;
      if (wbar > s.r_wbar) s.r_wbar = wbar, s.r_cur = t, s.r_pc = pc;
      else if (wbar == s.r_wbar && s.r_cur != t) s.r_cur = -2, s.r_pc = pc;
    }
    return;
  }
  // Earlier reads in this barrier interval conflict unless they were all this thread's, or all
  // of this warp and before a __syncwarp.
  if (s.r_bar == bar) {
    const bool other_warp = s.r_warp != warp;
    const bool same_interval_other = s.r_wbar == wbar && s.r_cur != t;
    if (other_warp || same_interval_other) report("write-after-read", s.r_cur >= 0 ? s.r_cur : -1, s.r_pc);
  }
  s.w_tid = t, s.w_bar = bar, s.w_wbar = wbar, s.w_pc = pc;
  s.r_bar = -1;
}

struct Totals {
  std::mutex mutex;
  std::vector<KernelCounters> kernels;
  std::map<std::pair<std::string, const void*>, size_t> index;  // (label, kernel) -> kernels[i]
  std::map<std::string, int> distinct;                          // kernels seen per label
  size_t current = 0;                                           // the launch being run
  std::unordered_set<uintptr_t> footprint;                      // sectors of the current launch
};
Totals& totals() {
  static Totals* t = new Totals;
  return *t;
}
std::atomic<bool> g_enabled{false};

// Adds the sectors of [addr, addr + size) to `sectors`.
void add_sectors(uintptr_t addr, uint32_t size, std::unordered_set<uintptr_t>& sectors) {
  for (uintptr_t s = addr / kSector; s <= (addr + size - 1) / kSector; ++s) sectors.insert(s);
}
}  // namespace

void set_enabled(bool on) { g_enabled = on; }
void set_racecheck(bool on) { g_racecheck = on; }
bool racecheck() { return g_racecheck.load(std::memory_order_relaxed); }

void barrier_passed() {
  BlockTrace& b = t_block;
  if (b.checking && b.tid >= 0) ++b.bars[static_cast<size_t>(b.tid)];
}
void warp_barrier_passed() {
  BlockTrace& b = t_block;
  if (b.checking && b.tid >= 0) ++b.wbars[static_cast<size_t>(b.tid)];
}

const Api& api() {
  static const Api table{&set_enabled, &reset, &snapshot};
  return table;
}
bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

void reset() {
  Totals& t = totals();
  std::lock_guard lock(t.mutex);
  t.kernels.clear();
  t.index.clear();
  t.distinct.clear();
  t.footprint.clear();
}

std::vector<KernelCounters> snapshot() {
  Totals& t = totals();
  std::lock_guard lock(t.mutex);
  return t.kernels;
}

void record(const void* addr, unsigned size, bool write, const void* pc) {
  // Every load and store of an instrumented kernel lands here: test the global switch before
  // touching thread-local state (a TLS lookup per access made counting-off runs 1.4x slower).
  if (!g_enabled.load(std::memory_order_relaxed) && !g_racecheck.load(std::memory_order_relaxed)) return;
  BlockTrace& b = t_block;
  if (!b.active || b.tid < 0 || size == 0 || !b.armed[static_cast<size_t>(b.tid)]) return;
  const auto a = reinterpret_cast<uintptr_t>(addr);
  if (a >= b.shared_begin && a < b.shared_end) {  // shared memory: racecheck, not traffic
    if (b.checking) {
      for (unsigned i = 0; i < size; ++i) check_shared_byte(b, a + i, write, pc);
    }
    return;
  }
  if (!b.counting) return;
  if (a >= b.stack_lo && a < b.stack_hi) return;        // the thread's locals
  b.lanes[static_cast<size_t>(b.tid)].push_back(Access{a, pc, size, write});
}

void record_atomic(const void*) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  BlockTrace& b = t_block;
  if (!b.active || b.tid < 0 || !b.armed[static_cast<size_t>(b.tid)]) return;
  Totals& t = totals();
  std::lock_guard lock(t.mutex);
  ++t.kernels[t.current].atomics;
}

void begin_launch(const char* label, const void* kernel, uint64_t blocks, int threads) {
  if (!enabled()) return;
  Totals& t = totals();
  std::lock_guard lock(t.mutex);
  const std::string name = label ? label : "(kernel)";
  auto [it, added] = t.index.try_emplace({name, kernel}, t.kernels.size());
  if (added) {
    KernelCounters k;
    k.label = name + "#" + std::to_string(++t.distinct[name]);
    t.kernels.push_back(k);
  }
  t.current = it->second;
  KernelCounters& k = t.kernels[t.current];
  ++k.launches;
  k.blocks += static_cast<int64_t>(blocks);
  k.threads += static_cast<int64_t>(blocks) * threads;
  t.footprint.clear();
}

void begin_block(int threads, const char* shared_begin, const char* shared_end, const char* label, int warp_size) {
  BlockTrace& b = t_block;
  b.counting = enabled();
  b.checking = racecheck() && shared_begin != nullptr;
  b.active = b.counting || b.checking;
  if (!b.active) return;
  if (b.checking) {
    b.label = label;
    b.warp_size = warp_size;
    b.bars.assign(static_cast<size_t>(threads), 0);
    b.wbars.assign(static_cast<size_t>(threads), 0);
    b.shadow.clear();
    b.conflict.clear();
  }
  b.lanes.assign(static_cast<size_t>(threads), {});
  b.armed.assign(static_cast<size_t>(threads), 0);
  b.shared_begin = reinterpret_cast<uintptr_t>(shared_begin);
  b.shared_end = reinterpret_cast<uintptr_t>(shared_end);
  b.tid = -1;
}

void set_thread(int tid, const void* stack_lo, const void* stack_hi) {
  BlockTrace& b = t_block;
  b.tid = tid;
  b.stack_lo = reinterpret_cast<uintptr_t>(stack_lo);
  b.stack_hi = reinterpret_cast<uintptr_t>(stack_hi);
}

void kernel_entry() {
  BlockTrace& b = t_block;
  if (b.active && b.tid >= 0) b.armed[static_cast<size_t>(b.tid)] = 1;
}

// Groups each warp's accesses per (instruction, k-th execution by the lane) like a GPU issues
// them, counts the 32-byte sectors each group touches and the distinct bytes it asked for.
void end_block(int warp_size) {
  BlockTrace& b = t_block;
  if (!b.active) return;
  b.active = false;
  b.tid = -1;
  if (b.checking) {
    b.checking = false;
    b.shadow.clear();
    if (!b.conflict.empty()) {
      b.lanes.clear();
      throw Error(std::move(b.conflict));
    }
  }
  if (!b.counting) {
    b.lanes.clear();
    return;
  }
  KernelCounters sum;
  std::unordered_set<uintptr_t> footprint;
  const int n = static_cast<int>(b.lanes.size());
  for (int w0 = 0; w0 < n; w0 += warp_size) {
    struct Group {
      bool write = false;
      std::vector<std::pair<uintptr_t, uint32_t>> ranges;
    };
    std::map<std::pair<const void*, int64_t>, Group> groups;
    for (int lane = w0; lane < std::min(n, w0 + warp_size); ++lane) {
      std::unordered_map<const void*, int64_t> seen;
      for (const Access& a : b.lanes[static_cast<size_t>(lane)]) {
        Group& g = groups[{a.pc, seen[a.pc]++}];
        g.write = a.write;
        g.ranges.emplace_back(a.addr, a.size);
      }
    }
    for (auto& [key, g] : groups) {
      std::unordered_set<uintptr_t> sectors;
      std::sort(g.ranges.begin(), g.ranges.end());
      int64_t bytes = 0;
      uintptr_t covered = 0;  // distinct bytes: the union of the lanes' ranges
      for (const auto& [addr, size] : g.ranges) {
        add_sectors(addr, size, sectors);
        const uintptr_t begin = std::max(addr, covered), end = addr + size;
        if (end > begin) bytes += static_cast<int64_t>(end - begin), covered = end;
      }
      footprint.insert(sectors.begin(), sectors.end());
      Traffic& t = g.write ? sum.stores : sum.loads;
      t.requests += 1;
      t.sectors += static_cast<int64_t>(sectors.size());
      t.bytes += bytes;
    }
  }
  b.lanes.clear();
  Totals& t = totals();
  std::lock_guard lock(t.mutex);
  KernelCounters& k = t.kernels[t.current];
  for (auto [to, from] : {std::pair{&k.loads, &sum.loads}, std::pair{&k.stores, &sum.stores}}) {
    to->requests += from->requests, to->sectors += from->sectors, to->bytes += from->bytes;
  }
  t.footprint.insert(footprint.begin(), footprint.end());
}

void end_launch() {
  if (!enabled()) return;
  Totals& t = totals();
  std::lock_guard lock(t.mutex);
  if (t.current < t.kernels.size()) t.kernels[t.current].footprint_sectors += static_cast<int64_t>(t.footprint.size());
  t.footprint.clear();
}

}  // namespace tessera::emu::access

// The counters' entry point for the benchmark, which finds it with dlsym in the emulated module.
TESSERA_MODULE_EXPORT const tessera::emu::access::Api* tessera_emulated_access_api() { return &tessera::emu::access::api(); }
