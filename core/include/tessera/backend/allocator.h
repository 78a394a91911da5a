#pragma once
// The caching allocator every backend allocates through. It keeps freed blocks in size
// buckets for reuse (device mallocs and large host mallocs are slow and fault pages in),
// keeps statistics, enforces an optional limit, and can surround blocks with guard bytes
// that are verified when a block is freed (catches kernels writing past their output).
// Stream-aware: a block remembers the stream that was current when it was allocated (a tag
// the backend provides) and a freed block is reused only for allocations on that same stream,
// because work queued on another stream may still be reading or writing it. A block that was
// also used on another stream (record_stream) is held back, when freed, until an event recorded
// then on each of those streams has been reached (polled at the next allocations, waited for
// before the limit or the device would refuse one); a use the backend cannot record an event
// for (another thread's per-thread default stream) holds the block until a device sync.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <unordered_map>
#include <vector>

namespace tessera {

/** Counters of one allocator (all byte counts are of user-visible, bucket-rounded sizes). */
struct AllocatorStats {
  int64_t in_use_bytes = 0;       ///< handed out and not yet freed
  int64_t reserved_bytes = 0;     ///< obtained from the raw allocator (in use + cached)
  int64_t peak_in_use_bytes = 0;  ///< high-water mark of in_use_bytes since reset_peak()
  int64_t allocation_count = 0;   ///< allocate() calls
  int64_t cache_hits = 0;         ///< allocate() calls served from the cache
  int64_t raw_allocations = 0;    ///< calls into the raw allocator
  int64_t guard_violations = 0;   ///< freed blocks whose guard bytes had been overwritten
  int64_t pending_bytes = 0;      ///< freed blocks waiting for other streams (record_stream)
  int64_t limit_bytes = 0;        ///< 0 = no limit
  int64_t failed_raw_allocations = 0;  ///< raw allocations that returned no memory (real or injected)
  int64_t device_syncs = 0;       ///< device-wide synchronisations the allocator itself asked for
};

/**
 * Events on streams, for freed blocks that other streams used (record_stream). `record` marks
 * the current end of the stream with the given tag and returns a handle, or nullptr when it
 * cannot (the block then waits for a device sync); `query` says whether it was reached without
 * blocking; `wait` blocks until it is. Called under the allocator's lock: they must not allocate.
 */
struct StreamEventHooks {
  std::function<std::shared_ptr<void>(const void* stream)> record;
  std::function<bool(const std::shared_ptr<void>&)> query;
  std::function<void(const std::shared_ptr<void>&)> wait;
};

/** The raw memory source under a CachingAllocator (malloc, cudaMalloc, hipMalloc, ...). */
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  /** Returns nullptr when out of memory (does not throw). */
  virtual void* raw_alloc(size_t nbytes) = 0;
  virtual void raw_free(void* ptr) = 0;
  /** True when the host may read and write the memory directly (needed for guard bytes). */
  virtual bool host_accessible() const = 0;
};

class CachingAllocator {
 public:
  /** `name` appears in error messages ("cpu:0"). The raw allocator must outlive this. */
  CachingAllocator(std::string name, RawAllocator& raw);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /**
   * Returns at least `nbytes` bytes aligned to 64. Zero bytes gives a valid unique pointer.
   * Throws tessera::OutOfMemory (with the stats) when the limit or the device is exhausted
   * even after releasing cached blocks.
   */
  void* allocate(size_t nbytes);
  /** Returns a block to the cache. Unknown pointers are ignored with a counted violation. */
  void deallocate(void* ptr);
  /** Releases every cached (free) block to the raw allocator. */
  void empty_cache();
  AllocatorStats stats() const;
  void reset_peak();
  /** Caps reserved bytes; 0 removes the cap. */
  void set_limit(int64_t bytes);
  /**
   * Fault injection (tests): the next `count` calls into the raw allocator fail as if the
   * device were out of memory, exercising the release-the-cache-and-retry path and the
   * OutOfMemory error. 0 turns it off.
   */
  void inject_raw_failures(int64_t count);
  /** Enables guard bytes around new blocks (host-accessible memory only). */
  void set_guards(bool on);
  /**
   * Stream support (device backends): `current` returns the calling thread's current stream
   * tag (nullptr = the default stream); `synchronize` waits for every stream of the device.
   */
  void set_stream_hooks(std::function<const void*()> current, std::function<void()> synchronize);
  /** Lets freed cross-stream blocks return to the cache once their streams pass an event. */
  void set_event_hooks(StreamEventHooks hooks);
  /** Marks the live block at `ptr` as also used on `stream`: when freed it waits for that
   *  stream's work queued until then (an event, or a device sync without event hooks). */
  void record_stream(void* ptr, const void* stream);
  /** record_stream with the calling thread's current stream (from the `current` hook). */
  void record_current_stream(void* ptr);
  /**
   * Graph capture: while `pool` is set, the calling thread's allocations come from blocks tagged
   * `pool` (reused only by later allocations under the same pool), so memory a captured graph
   * reads or writes is never handed to eager work; nullptr ends it.
   */
  void set_capture_pool(const void* pool);
  /** The graph of `pool` is gone: its cached blocks become ordinary default-stream blocks. Until
   *  then they survive empty_cache() and out-of-memory retries (a replay still uses them). */
  void release_pool(const void* pool);
  /** After the device was synchronised: blocks held for other streams become reusable. */
  void release_pending();
  bool guards() const { return guards_; }
  const std::string& name() const { return name_; }

 private:
  struct Block {
    void* base;        // what the raw allocator returned
    size_t bucket;     // usable bytes of the block
    size_t requested;  // bytes the caller asked for (guards cover the rest)
    bool guarded;
    const void* stream = nullptr;      // tag of the stream it was allocated on
    std::vector<const void*> uses;     // other streams that used it (record_stream)
  };
  struct PendingBlock {
    Block block;
    std::vector<std::shared_ptr<void>> events;  // one per use; empty with needs_sync
    bool needs_sync = false;                    // an event could not be recorded: wait for a device sync
  };
  static size_t bucket_size(size_t nbytes);
  void release_cache_locked();
  void* raw_alloc_locked(size_t nbytes);  // the raw allocator, or an injected failure
  void release_pending_locked();
  // Moves pending blocks whose events were reached to the cache; with `wait`, first waits for
  // every event (never a device-wide sync). Returns whether any block moved.
  bool reclaim_pending_locked(bool wait);
  void device_sync_locked();
  void check_guards_locked(const Block& b, const char* user);

  std::string name_;
  RawAllocator& raw_;
  mutable std::mutex mutex_;
  std::multimap<size_t, Block> free_blocks_;        // by bucket size
  std::vector<PendingBlock> pending_blocks_;        // freed, but used on another stream
  std::function<const void*()> current_stream_;
  std::function<void()> synchronize_;
  StreamEventHooks events_;
  std::unordered_map<void*, Block> live_blocks_;    // by user pointer
  AllocatorStats stats_;
  bool guards_ = false;
  int64_t inject_failures_ = 0;
  const void* capture_pool_ = nullptr;
  std::vector<const void*> pools_;  // pools of live graphs
  std::thread::id capture_thread_;
};

}  // namespace tessera
