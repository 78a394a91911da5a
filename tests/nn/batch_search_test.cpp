// nn::find_max_batch: the bounded search behind `tessera train --batch-size auto`, on a step
// whose memory use is known, under the allocator's limit on the backend under test.
#include "support/checks.h"
#include "tessera/nn/batch_search.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;

namespace {
constexpr int64_t kPerSample = 64 << 10;  // bytes one sample of the fake step holds

// A step holding `batch` samples at once, like activations kept for backward (one block per
// sample, of a size the allocator does not round).
void fake_step(int64_t batch) {
  std::vector<Tensor> held;
  for (int64_t i = 0; i < batch; ++i) held.push_back(empty({kPerSample / 4}, DType::f32, device()));
}

// Caps the device at what it holds now plus `extra` bytes.
struct LimitGuard {
  explicit LimitGuard(int64_t extra) {
    empty_cache(device());
    bytes = memory_stats(device()).reserved_bytes + extra;
    set_memory_limit(device(), bytes);
  }
  int64_t bytes = 0;
  ~LimitGuard() { set_memory_limit(device(), 0); }
};
}  // namespace

TEST_CASE("find_max_batch finds the boundary within its tolerance and recovers from every OutOfMemory") {
  const LimitGuard limit(100 * kPerSample);  // about 100 samples fit
  BatchSearchOptions o;
  o.device = device();
  o.start = 8;
  o.max = 4096;
  const BatchSearchResult r = find_max_batch(fake_step, o);
  CHECK(r.batch >= 80);
  CHECK(r.batch <= 100);
  CHECK(r.trials.size() <= static_cast<size_t>(o.max_trials));
  int64_t largest_fit = 0, smallest_fail = o.max + 1;
  for (const BatchTrial& t : r.trials) {
    if (t.fits) {
      largest_fit = std::max(largest_fit, t.batch);
      CHECK(t.samples_per_second > 0);
      CHECK(t.peak_bytes >= t.batch * kPerSample);
    } else {
      smallest_fail = std::min(smallest_fail, t.batch);
      CHECK(t.error.find("allocate: ") == 0);  // the allocator's own message
    }
  }
  CHECK(largest_fit == r.batch);
  CHECK(largest_fit < smallest_fail);
  CHECK(static_cast<double>(smallest_fail - largest_fit) <= o.tolerance * static_cast<double>(largest_fit) + 8);
  CHECK(r.table().find("<- chosen") != std::string::npos);
  CHECK(memory_stats(device()).limit_bytes == limit.bytes);  // the caller's limit stays
  // Every OOM trial returned its memory: a step at the chosen size still fits afterwards.
  CHECK_NOTHROW(fake_step(r.batch));
}

TEST_CASE("find_max_batch stops at max, shrinks below start, and names the device when nothing fits") {
  BatchSearchOptions o;
  o.device = device();
  o.start = 64;
  o.max = 100;
  {
    const LimitGuard limit(1000 * kPerSample);
    const BatchSearchResult r = find_max_batch(fake_step, o);
    CHECK(r.batch == 100);
    CHECK(r.trials.size() == 2);  // 64, then max
  }
  {
    const LimitGuard limit(20 * kPerSample);
    const BatchSearchResult r = find_max_batch(fake_step, o);
    CHECK(r.batch >= 16);
    CHECK(r.batch <= 20);
    CHECK_FALSE(r.trials.front().fits);
  }
  {
    const LimitGuard limit(kPerSample / 2);
    TESSERA_CHECK_THROWS_WITH(find_max_batch(fake_step, o), ("find_max_batch: not even batch 1 fits on " + device().str()).c_str());
  }
  // Errors other than running out of memory are the caller's, not a size that does not fit.
  TESSERA_CHECK_THROWS_WITH(find_max_batch([](int64_t) { throw Error("step: broken"); }, o), "step: broken");
  o.max = 0;
  TESSERA_CHECK_THROWS_WITH(find_max_batch(fake_step, o), "find_max_batch: needs max");
}

TEST_CASE("find_max_batch caps a limitless device for the search only") {
  REQUIRE(memory_stats(device()).limit_bytes == 0);
  empty_cache(device());
  BatchSearchOptions o;
  o.device = device();
  o.start = 4;
  o.max = 16;
  o.memory_budget = memory_stats(device()).reserved_bytes + 8 * kPerSample;
  int64_t limit_seen = 0;
  const BatchSearchResult r = find_max_batch(
      [&](int64_t b) {
        limit_seen = memory_stats(device()).limit_bytes;
        fake_step(b);
      },
      o);
  CHECK(limit_seen == o.memory_budget);
  CHECK(r.memory_budget == o.memory_budget);
  CHECK(r.batch <= 8);
  CHECK(memory_stats(device()).limit_bytes == 0);  // lifted again
}
