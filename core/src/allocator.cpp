#include "tessera/backend/allocator.h"

#include <algorithm>
#include <cstring>

#include "profiler_internal.h"
#include "tessera/error.h"

namespace tessera {

namespace {
constexpr size_t kAlignment = 64;
constexpr size_t kRedzone = 64;  // guard bytes before the block (a multiple of kAlignment)
constexpr unsigned char kGuardByte = 0xAB;
constexpr size_t kSmallLimit = size_t{1} << 20;

std::string stats_text(const AllocatorStats& s) {
  return detail::concat("in use ", s.in_use_bytes, " B, reserved ", s.reserved_bytes, " B, peak ",
                        s.peak_in_use_bytes, " B, limit ", s.limit_bytes ? std::to_string(s.limit_bytes) : "none");
}
}  // namespace

CachingAllocator::CachingAllocator(std::string name, RawAllocator& raw) : name_(std::move(name)), raw_(raw) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  release_pending_locked();  // at teardown no stream work is pending any more
  release_cache_locked();
  // Live blocks at exit belong to tensors that outlive the allocator (static tensors);
  // leave them alone rather than free memory still referenced.
}

// Small requests round to 512 B, large ones to 1 MiB, so freed blocks fit later requests of
// similar size (the common case: the same shapes every training step).
size_t CachingAllocator::bucket_size(size_t nbytes) {
  if (nbytes == 0) nbytes = 1;
  const size_t unit = nbytes < kSmallLimit ? 512 : kSmallLimit;
  return (nbytes + unit - 1) / unit * unit;
}

void* CachingAllocator::allocate(size_t nbytes) {
  const size_t bucket = bucket_size(nbytes);
  const void* stream = current_stream_ ? current_stream_() : nullptr;
  std::lock_guard lock(mutex_);
  if (capture_pool_ && std::this_thread::get_id() == capture_thread_) stream = capture_pool_;
  ++stats_.allocation_count;
  if (!pending_blocks_.empty()) reclaim_pending_locked(false);  // cheap polls: blocks come back once their streams passed
  Block block{};
  bool found = false;
  // Reuse a cached block of the same guard mode and stream, no more than twice the size we need.
  // Not inside a guarded capture: the guards are written now, by the host, but the captured
  // kernels of the block's previous owner run later, at replay, and would trample them.
  const bool reuse = !(guards_ && stream && stream == capture_pool_);
  const auto take_cached = [&] {
    for (auto it = free_blocks_.lower_bound(bucket); reuse && it != free_blocks_.end() && it->first <= 2 * bucket; ++it) {
      if (it->second.guarded == guards_ && it->second.stream == stream) {
        block = it->second;
        free_blocks_.erase(it);
        found = true;
        ++stats_.cache_hits;
        return;
      }
    }
  };
  take_cached();
  const auto over_limit = [&] { return stats_.limit_bytes && stats_.reserved_bytes + static_cast<int64_t>(bucket) > stats_.limit_bytes; };
  if (!found && over_limit() && !pending_blocks_.empty()) {
    // Blocks held for other streams count against the limit: wait for their events (never the
    // whole device) and reuse one before growing.
    if (reclaim_pending_locked(true)) take_cached();
  }
  if (!found) {
    const bool guarded = guards_ && raw_.host_accessible();
    const size_t total = bucket + (guarded ? 2 * kRedzone : 0);
    if (over_limit()) release_cache_locked();
    if (over_limit() && !pending_blocks_.empty()) {
      device_sync_locked();  // only blocks no event could be recorded for are left
      release_cache_locked();
    }
    if (over_limit()) {
      throw OutOfMemory(detail::concat("allocate: ", name_, " cannot allocate ", nbytes, " B within its limit (",
                                       stats_text(stats_), ")"));
    }
    void* base = raw_alloc_locked(total);
    if (!base) {
      // Out of memory: wait for the streams blocks are held for (their events first, the whole
      // device only for blocks without one) so they can go too, then retry.
      if (!pending_blocks_.empty()) reclaim_pending_locked(true);
      if (!pending_blocks_.empty()) device_sync_locked();
      release_cache_locked();
      base = raw_alloc_locked(total);
    }
    if (!base) {
      throw OutOfMemory(
          detail::concat("allocate: ", name_, " is out of memory allocating ", nbytes, " B (", stats_text(stats_), ")"));
    }
    ++stats_.raw_allocations;
    stats_.reserved_bytes += static_cast<int64_t>(bucket);
    block = Block{base, bucket, 0, guarded, nullptr, {}};
  }
  block.stream = stream;
  block.uses.clear();
  block.requested = nbytes;
  unsigned char* user = static_cast<unsigned char*>(block.base) + (block.guarded ? kRedzone : 0);
  if (block.guarded) {
    std::memset(block.base, kGuardByte, kRedzone);
    std::memset(user + nbytes, kGuardByte, block.bucket - nbytes + kRedzone);
  }
  live_blocks_.emplace(user, block);
  stats_.in_use_bytes += static_cast<int64_t>(block.bucket);
  if (stats_.in_use_bytes > stats_.peak_in_use_bytes) stats_.peak_in_use_bytes = stats_.in_use_bytes;
  if (profile::detail::on()) profile::detail::add_counter("memory " + name_, static_cast<double>(stats_.in_use_bytes));
  return user;
}

void* CachingAllocator::raw_alloc_locked(size_t nbytes) {
  void* p = nullptr;
  if (inject_failures_ > 0) --inject_failures_;
  else p = raw_.raw_alloc(nbytes);
  if (!p) ++stats_.failed_raw_allocations;
  return p;
}

void CachingAllocator::inject_raw_failures(int64_t count) {
  std::lock_guard lock(mutex_);
  inject_failures_ = count;
}

void CachingAllocator::check_guards_locked(const Block& b, const char* user) {
  const auto* base = static_cast<const unsigned char*>(b.base);
  bool ok = true;
  for (size_t i = 0; i < kRedzone && ok; ++i) ok = base[i] == kGuardByte;
  const auto* tail = reinterpret_cast<const unsigned char*>(user) + b.requested;
  const size_t tail_len = b.bucket - b.requested + kRedzone;
  for (size_t i = 0; i < tail_len && ok; ++i) ok = tail[i] == kGuardByte;
  if (!ok) ++stats_.guard_violations;
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_blocks_.find(ptr);
  if (it == live_blocks_.end()) {
    ++stats_.guard_violations;  // freeing memory we never handed out is a bug worth counting
    return;
  }
  const Block block = it->second;
  live_blocks_.erase(it);
  if (block.guarded) check_guards_locked(block, static_cast<const char*>(ptr));
  stats_.in_use_bytes -= static_cast<int64_t>(block.bucket);
  if (profile::detail::on()) profile::detail::add_counter("memory " + name_, static_cast<double>(stats_.in_use_bytes));
  if (!block.uses.empty()) {
    PendingBlock p{block, {}, !events_.record};
    for (const void* s : block.uses) {
      if (p.needs_sync) break;
      if (auto e = events_.record(s)) p.events.push_back(std::move(e));
      else p.needs_sync = true;
    }
    if (p.needs_sync) p.events.clear();
    pending_blocks_.push_back(std::move(p));
    stats_.pending_bytes += static_cast<int64_t>(block.bucket);
    return;
  }
  free_blocks_.emplace(block.bucket, block);
}

void CachingAllocator::set_stream_hooks(std::function<const void*()> current, std::function<void()> synchronize) {
  std::lock_guard lock(mutex_);
  current_stream_ = std::move(current);
  synchronize_ = std::move(synchronize);
}

void CachingAllocator::set_event_hooks(StreamEventHooks hooks) {
  std::lock_guard lock(mutex_);
  events_ = std::move(hooks);
}

void CachingAllocator::set_capture_pool(const void* pool) {
  std::lock_guard lock(mutex_);
  capture_pool_ = pool;
  capture_thread_ = std::this_thread::get_id();
  if (pool && std::find(pools_.begin(), pools_.end(), pool) == pools_.end()) pools_.push_back(pool);
}

void CachingAllocator::release_pool(const void* pool) {
  std::lock_guard lock(mutex_);
  pools_.erase(std::remove(pools_.begin(), pools_.end(), pool), pools_.end());
  std::multimap<size_t, Block> kept;
  for (auto& [size, block] : free_blocks_) {
    if (block.stream == pool) block.stream = nullptr;
    kept.emplace(size, block);
  }
  free_blocks_ = std::move(kept);
}

void CachingAllocator::record_stream(void* ptr, const void* stream) {
  std::lock_guard lock(mutex_);
  auto it = live_blocks_.find(ptr);
  if (it == live_blocks_.end() || it->second.stream == stream) return;
  auto& uses = it->second.uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

void CachingAllocator::record_current_stream(void* ptr) {
  const void* stream = current_stream_ ? current_stream_() : nullptr;  // the hook may run queued work: not under the lock
  record_stream(ptr, stream);
}

void CachingAllocator::release_pending_locked() {
  for (const PendingBlock& p : pending_blocks_) free_blocks_.emplace(p.block.bucket, p.block);
  pending_blocks_.clear();
  stats_.pending_bytes = 0;
}

bool CachingAllocator::reclaim_pending_locked(bool wait) {
  if (!events_.query) return false;
  bool moved = false;
  for (auto it = pending_blocks_.begin(); it != pending_blocks_.end();) {
    bool reached = !it->needs_sync;
    for (const auto& e : it->events) {
      if (!reached) break;
      if (wait) events_.wait(e);
      else reached = events_.query(e);
    }
    if (!reached) {
      ++it;
      continue;
    }
    free_blocks_.emplace(it->block.bucket, it->block);
    stats_.pending_bytes -= static_cast<int64_t>(it->block.bucket);
    it = pending_blocks_.erase(it);
    moved = true;
  }
  return moved;
}

void CachingAllocator::device_sync_locked() {
  if (!synchronize_) return;
  synchronize_();
  ++stats_.device_syncs;
  release_pending_locked();
}

void CachingAllocator::release_pending() {
  std::lock_guard lock(mutex_);
  release_pending_locked();
}

void CachingAllocator::release_cache_locked() {
  for (auto it = free_blocks_.begin(); it != free_blocks_.end();) {
    // Blocks of a live graph's pool stay: its replays still read and write them.
    if (std::find(pools_.begin(), pools_.end(), it->second.stream) != pools_.end()) {
      ++it;
      continue;
    }
    raw_.raw_free(it->second.base);
    stats_.reserved_bytes -= static_cast<int64_t>(it->first);
    it = free_blocks_.erase(it);
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  if (!pending_blocks_.empty()) reclaim_pending_locked(true);
  if (!pending_blocks_.empty()) device_sync_locked();
  release_cache_locked();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_in_use_bytes = stats_.in_use_bytes;
}

void CachingAllocator::set_limit(int64_t bytes) {
  TESSERA_CHECK(bytes >= 0, "set_memory_limit", "limit must be >= 0, got ", bytes);
  std::lock_guard lock(mutex_);
  stats_.limit_bytes = bytes;
}

void CachingAllocator::set_guards(bool on) {
  std::lock_guard lock(mutex_);
  guards_ = on && raw_.host_accessible();
}

}  // namespace tessera
