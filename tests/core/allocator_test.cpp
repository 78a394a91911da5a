// The caching allocator: reuse, statistics, limits with OutOfMemory, and guard bytes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "tessera/backend/allocator.h"
#include "tessera/error.h"

using namespace tessera;

namespace {
class CountingMemory final : public RawAllocator {
 public:
  int live = 0;
  void* raw_alloc(size_t n) override {
    ++live;
    return std::aligned_alloc(64, (n + 63) / 64 * 64);
  }
  void raw_free(void* p) override {
    --live;
    std::free(p);
  }
  bool host_accessible() const override { return true; }
};
}  // namespace

TEST_CASE("freed blocks are reused and statistics track use") {
  CountingMemory mem;
  CachingAllocator alloc("test", mem);
  void* a = alloc.allocate(1000);
  CHECK(reinterpret_cast<uintptr_t>(a) % 64 == 0);
  auto s = alloc.stats();
  CHECK(s.in_use_bytes == 1024);
  CHECK(s.raw_allocations == 1);
  alloc.deallocate(a);
  void* b = alloc.allocate(900);  // same 1024-byte bucket
  CHECK(b == a);
  s = alloc.stats();
  CHECK(s.cache_hits == 1);
  CHECK(s.allocation_count == 2);
  CHECK(s.peak_in_use_bytes == 1024);
  void* big = alloc.allocate(3 << 20);
  CHECK(alloc.stats().peak_in_use_bytes == 1024 + (3 << 20));
  alloc.deallocate(big);
  alloc.deallocate(b);
  CHECK(alloc.stats().in_use_bytes == 0);
  CHECK(mem.live == 2);
  alloc.empty_cache();
  CHECK(mem.live == 0);
  CHECK(alloc.stats().reserved_bytes == 0);
  void* z = alloc.allocate(0);
  CHECK(z != nullptr);
  alloc.deallocate(z);
}

TEST_CASE("the limit releases cached blocks first, then throws OutOfMemory with the stats") {
  CountingMemory mem;
  CachingAllocator alloc("test:0", mem);
  alloc.set_limit(4 << 20);
  void* a = alloc.allocate(2 << 20);
  alloc.deallocate(a);                 // cached, still reserved
  void* b = alloc.allocate(3 << 20);   // does not fit beside the cached block: cache is released
  CHECK(mem.live == 1);
  CHECK_THROWS_WITH_AS(alloc.allocate(2 << 20), doctest::Contains("allocate: test:0 cannot allocate"), OutOfMemory);
  alloc.deallocate(b);
  CHECK_THROWS_AS(alloc.set_limit(-1), Error);
}

TEST_CASE("injected raw failures: the cache is released and retried, then OutOfMemory names the request and stats") {
  CountingMemory mem;
  CachingAllocator alloc("test:0", mem);
  void* a = alloc.allocate(1 << 20);
  alloc.deallocate(a);                  // 1 MiB cached
  alloc.inject_raw_failures(1);
  void* b = alloc.allocate(5 << 20);    // the first raw call fails; the cache goes, the retry succeeds
  CHECK(mem.live == 1);
  CHECK(alloc.stats().failed_raw_allocations == 1);
  CHECK(alloc.stats().reserved_bytes == (5 << 20));
  alloc.inject_raw_failures(2);
  CHECK_THROWS_WITH_AS(alloc.allocate(7 << 20),
                       doctest::Contains("allocate: test:0 is out of memory allocating 7340032 B (in use 5242880 B, reserved 5242880 B"),
                       OutOfMemory);
  CHECK(alloc.stats().failed_raw_allocations == 3);
  void* c = alloc.allocate(7 << 20);    // recovered: nothing is left broken
  CHECK(alloc.stats().in_use_bytes == (12 << 20));
  alloc.deallocate(c);
  alloc.deallocate(b);
  alloc.empty_cache();
  CHECK(mem.live == 0);
}

TEST_CASE("guard bytes catch writes past the end of a block") {
  CountingMemory mem;
  CachingAllocator alloc("test", mem);
  alloc.set_guards(true);
  auto* p = static_cast<unsigned char*>(alloc.allocate(100));
  std::memset(p, 1, 100);
  alloc.deallocate(p);
  CHECK(alloc.stats().guard_violations == 0);
  p = static_cast<unsigned char*>(alloc.allocate(100));
  p[100] = 7;  // one byte too far
  alloc.deallocate(p);
  CHECK(alloc.stats().guard_violations == 1);
  p = static_cast<unsigned char*>(alloc.allocate(64));
  p[-1] = 7;  // one byte before
  alloc.deallocate(p);
  CHECK(alloc.stats().guard_violations == 2);
  int not_ours = 0;
  alloc.deallocate(&not_ours);
  CHECK(alloc.stats().guard_violations == 3);
}

TEST_CASE("blocks are reused only on the stream they were allocated on") {
  CountingMemory mem;
  CachingAllocator alloc("test", mem);
  int stream_a = 0, stream_b = 0;  // two distinct stream tags
  const void* current = &stream_a;
  int syncs = 0;
  alloc.set_stream_hooks([&] { return current; }, [&] { ++syncs; });
  void* a = alloc.allocate(4096);
  alloc.deallocate(a);
  current = &stream_b;
  void* b = alloc.allocate(4096);  // stream B must not get A's block: A's work may still use it
  CHECK(b != a);
  current = &stream_a;
  void* a2 = alloc.allocate(4096);
  CHECK(a2 == a);  // same stream: in-order, safe to reuse at once
  alloc.deallocate(a2);
  alloc.deallocate(b);
  CHECK(alloc.stats().raw_allocations == 2);
}

TEST_CASE("a block recorded on another stream waits for a synchronisation before reuse") {
  CountingMemory mem;
  CachingAllocator alloc("test", mem);
  int stream_a = 0, stream_b = 0;
  const void* current = &stream_a;
  int syncs = 0;
  alloc.set_stream_hooks([&] { return current; }, [&] { ++syncs; });
  void* a = alloc.allocate(4096);
  alloc.record_stream(a, &stream_b);  // also read by work on stream B
  alloc.deallocate(a);
  CHECK(alloc.stats().pending_bytes == 4096);
  void* again = alloc.allocate(4096);
  CHECK(again != a);  // held back although it is the same stream
  alloc.release_pending();  // what synchronize(device) does after the device is idle
  CHECK(alloc.stats().pending_bytes == 0);
  void* reused = alloc.allocate(4096);
  CHECK(reused == a);
  // Recording the allocation stream itself changes nothing.
  alloc.record_stream(reused, &stream_a);
  alloc.deallocate(reused);
  CHECK(alloc.stats().pending_bytes == 0);
  alloc.deallocate(again);
  // empty_cache synchronises first when blocks are pending, then frees everything.
  void* p = alloc.allocate(4096);
  alloc.record_stream(p, &stream_b);
  alloc.deallocate(p);
  alloc.empty_cache();
  CHECK(syncs == 1);
  CHECK(mem.live == 0);
}

namespace {
// Events on fake streams: a stream's "position" advances when the test says its work ran.
struct FakeStreams {
  std::map<const void*, int> queued, done;  // per stream tag: work items queued / finished
  int waits = 0;
  struct Mark {
    const void* stream;
    int position;
  };
  StreamEventHooks hooks() {
    return {[this](const void* s) -> std::shared_ptr<void> {
              if (s == nullptr) return nullptr;  // a stream no event can be recorded on
              return std::make_shared<Mark>(Mark{s, queued[s]});
            },
            [this](const std::shared_ptr<void>& e) {
              const auto* m = static_cast<const Mark*>(e.get());
              return done[m->stream] >= m->position;
            },
            [this](const std::shared_ptr<void>& e) {
              const auto* m = static_cast<const Mark*>(e.get());
              ++waits;
              done[m->stream] = std::max(done[m->stream], m->position);
            }};
  }
};

// An allocator whose blocks belong to a copy stream, with fake events on the other streams.
struct EventAllocator {
  CountingMemory mem;
  CachingAllocator alloc{"test", mem};
  int copy_stream = 0, compute_stream = 0;
  int syncs = 0;
  FakeStreams fake;
  EventAllocator() {
    alloc.set_stream_hooks([this] { return static_cast<const void*>(&copy_stream); }, [this] { ++syncs; });
    alloc.set_event_hooks(fake.hooks());
  }
};
}  // namespace

TEST_CASE("a block used on another stream returns to the cache once that stream passes its event, with no device sync") {
  EventAllocator t;
  auto& [mem, alloc, copy_stream, compute_stream, syncs, fake] = t;
  void* a = alloc.allocate(4096);
  fake.queued[&compute_stream] = 3;  // the consumer queued three kernels reading the block
  alloc.record_stream(a, &compute_stream);
  alloc.deallocate(a);
  CHECK(alloc.stats().pending_bytes == 4096);
  void* b = alloc.allocate(4096);
  CHECK(b != a);  // its reader has not finished
  fake.done[&compute_stream] = 3;
  void* c = alloc.allocate(4096);  // polled: the event was reached
  CHECK(c == a);
  CHECK(alloc.stats().pending_bytes == 0);
  CHECK(syncs == 0);
  CHECK(alloc.stats().device_syncs == 0);
  alloc.deallocate(b);
  alloc.deallocate(c);
}

TEST_CASE("under a memory limit, blocks held for other streams are waited for by event before OutOfMemory") {
  EventAllocator t;
  auto& [mem, alloc, copy_stream, compute_stream, syncs, fake] = t;
  alloc.set_limit(4 * 4096);
  // A loader's life: each batch is uploaded on the copy stream, read on the compute stream and
  // freed while its reads may still be queued; 1,000 batches in the room of four.
  for (int step = 0; step < 1000; ++step) {
    void* batch = alloc.allocate(4096);
    fake.queued[&compute_stream] += 1;
    alloc.record_stream(batch, &compute_stream);
    alloc.deallocate(batch);
    CHECK(alloc.stats().reserved_bytes <= 4 * 4096);
  }
  CHECK(fake.waits > 0);  // the limit made it wait for the consumer, by event
  CHECK(syncs == 0);
  CHECK(alloc.stats().device_syncs == 0);
  // A use no event can be recorded for (another thread's default stream) falls back to a device sync.
  alloc.set_limit(4096);
  alloc.empty_cache();
  void* p = alloc.allocate(4096);
  alloc.record_stream(p, nullptr);
  alloc.deallocate(p);
  void* q = alloc.allocate(4096);
  CHECK(syncs == 1);
  CHECK(alloc.stats().device_syncs == 1);
  alloc.deallocate(q);
}
