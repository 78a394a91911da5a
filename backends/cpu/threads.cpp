// The CPU backend's threads: parallel_for over oneTBB (or, under ThreadSanitizer, a pool TSan
// can see through) and the process's thread limit (tessera::set_num_threads).
#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cpu_backend.h"
#include "tessera/error.h"
#include "tessera/runtime.h"

namespace tessera {
namespace cpu {

namespace {
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
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain), [&](const tbb::blocked_range<int64_t>& r) { fn(r.begin(), r.end()); });
#endif
}

}  // namespace cpu

void set_num_threads(int threads) {
  TESSERA_CHECK(threads >= 0, "set_num_threads", "threads must be >= 0, got ", threads);
  std::lock_guard lock(cpu::g_threads_mutex);
  cpu::g_thread_limit.reset();
  if (threads > 0) {
    cpu::g_thread_limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  }
  cpu::g_threads = threads;
}

int num_threads() { return static_cast<int>(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)); }

}  // namespace tessera
