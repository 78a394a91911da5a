// Registers the CPU backend: allocator, device facts, and the kernel table.
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/version.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <string>

#include "cpu_backend.h"
#include "tessera/backend/registry.h"
#include "tessera/runtime.h"

#if defined(TESSERA_CPU_HAS_AVX512_VARIANT)
namespace tessera::cpu::avx512 {
void register_kernels(KernelTable& table);
const char* simd_path();
}  // namespace tessera::cpu::avx512
#endif

namespace tessera {
namespace cpu {
namespace {

class HostMemory final : public RawAllocator {
 public:
  void* raw_alloc(size_t nbytes) override { return std::aligned_alloc(64, (nbytes + 63) / 64 * 64); }
  void raw_free(void* ptr) override { std::free(ptr); }
  bool host_accessible() const override { return true; }
};

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

std::string cpu_feature_list() {
  std::string f;
  auto add = [&f](bool on, const char* name) {
    if (on) f += (f.empty() ? "" : " ") + std::string(name);
  };
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  add(__builtin_cpu_supports("sse4.2"), "sse4.2");
  add(__builtin_cpu_supports("avx"), "avx");
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  const CpuFeatures& cf = cpu_features();
  add(cf.f16c, "f16c");
  add(cf.avx512f, "avx512f");
  add(cf.avx512bw, "avx512bw");
  add(cf.avx512vl, "avx512vl");
  add(cf.avx512dq, "avx512dq");
  add(cf.avx512bf16, "avx512_bf16");
  add(cf.avx512fp16, "avx512_fp16");
#elif defined(__aarch64__)
  add(true, "neon");
#endif
  return f.empty() ? "none detected" : f;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() : allocator_("cpu:0", memory_) {
    if (const char* g = std::getenv("TESSERA_ALLOC_GUARD"); g && std::strcmp(g, "0") != 0) allocator_.set_guards(true);
    // One kernel set for the process, chosen once: every kernel then agrees on the ISA.
    isa_ = select_isa();
#if defined(TESSERA_CPU_HAS_AVX512_VARIANT)
    if (isa_ == Isa::avx512) {
      avx512::register_kernels(kernels_);
      simd_ = avx512::simd_path();
      return;
    }
#endif
    base::register_kernels(kernels_);
    simd_ = base::simd_path();
  }
  const char* name() const override { return "cpu"; }
  DeviceType device_type() const override { return DeviceType::cpu; }
  int device_count() const override { return 1; }
  DeviceInfo device_info(int) const override {
    DeviceInfo info;
    info.name = cpu_model_name();
    info.total_memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
    info.compute_units = tbb::info::default_concurrency();
    info.properties = {{"simd (cpu)", cpu_feature_list()},
                       {"simd (kernels)", simd_},
                       {"kernel ISA", isa_name(isa_) + (std::getenv("TESSERA_CPU_ISA") ? " (TESSERA_CPU_ISA)" : " (cpuid)") +
                                          (has_avx512_variant() ? "; built: " + isa_name(Isa::base) + ", avx512" : "; built: " + isa_name(Isa::base))},
                       {"threads", std::to_string(num_threads())}};
    return info;
  }
  std::vector<std::pair<std::string, std::string>> build_info() const override {
    return {{"oneTBB", std::to_string(TBB_VERSION_MAJOR) + "." + std::to_string(TBB_VERSION_MINOR)},
            {"kernels", std::to_string(kernels_.count()) + "/" + std::to_string(kOpCount) + " ops"}};
  }
  CachingAllocator& allocator(int) override { return allocator_; }
  bool host_accessible() const override { return true; }
  void copy_from_host(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void copy_to_host(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void copy_on_device(void* dst, int, const void* src, int, size_t n) override { std::memcpy(dst, src, n); }
  void synchronize(int) override {}

 private:
  HostMemory memory_;
  CachingAllocator allocator_;
  Isa isa_ = Isa::base;
  const char* simd_ = "";
};

std::mutex g_threads_mutex;
std::unique_ptr<tbb::global_control> g_thread_limit;
int g_threads = 0;

}  // namespace

#if defined(__SANITIZE_THREAD__)
namespace {
// Under ThreadSanitizer (the tsan preset) the ranges run on a small pool built from std::mutex
// and std::condition_variable instead of oneTBB: Debian's libtbb is not instrumented, so TSan
// cannot see the happens-before edges of TBB's task hand-off and reports its internals. With
// this pool every edge is visible, and what TSan checks is what matters here: that the
// kernels' ranges never touch the same bytes. The chunking follows the grain as TBB's does.
class TsanPool {
 public:
  explicit TsanPool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  }
  ~TsanPool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    std::unique_lock lock(mutex_);
    fn_ = &fn;
    n_ = n;
    grain_ = grain;
    next_ = 0;
    busy_ = 0;
    ++generation_;
    wake_.notify_all();
    drain(lock);
    done_.wait(lock, [&] { return busy_ == 0 && next_ >= n_; });
    fn_ = nullptr;
  }

 private:
  // Takes chunks until none is left; called with the lock held, runs fn unlocked.
  void drain(std::unique_lock<std::mutex>& lock) {
    while (fn_ && next_ < n_) {
      const int64_t b = next_, e = std::min(n_, b + grain_);
      next_ = e;
      ++busy_;
      const auto* fn = fn_;
      lock.unlock();
      (*fn)(b, e);
      lock.lock();
      if (--busy_ == 0 && next_ >= n_) done_.notify_all();
    }
  }
  void work() {
    std::unique_lock lock(mutex_);
    uint64_t seen = 0;
    while (true) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      drain(lock);
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1, next_ = 0, busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};
}  // namespace
#endif

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (n <= grain || num_threads() == 1) {
    fn(0, n);
    return;
  }
#if defined(__SANITIZE_THREAD__)
  static std::mutex one_at_a_time;  // nested or concurrent calls run serially on the caller
  std::unique_lock guard(one_at_a_time, std::try_to_lock);
  if (!guard.owns_lock()) {
    fn(0, n);
    return;
  }
  static TsanPool pool(std::max(num_threads() - 1, 1));
  // Chunks of at least the grain, and enough of them to spread over the threads.
  pool.run(n, std::max(grain, n / (4 * num_threads()) + 1), fn);
#else
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) { fn(r.begin(), r.end()); });
#endif
}


}  // namespace cpu

void register_cpu_backend() { register_backend(std::make_unique<cpu::CpuBackend>()); }

void set_num_threads(int threads) {
  TESSERA_CHECK(threads >= 0, "set_num_threads", "threads must be >= 0, got ", threads);
  std::lock_guard lock(cpu::g_threads_mutex);
  cpu::g_thread_limit.reset();
  if (threads > 0) {
    cpu::g_thread_limit =
        std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  }
  cpu::g_threads = threads;
}

int num_threads() {
  return static_cast<int>(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism));
}

}  // namespace tessera
