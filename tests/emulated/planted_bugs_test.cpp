// The emulator's reason to exist: it must catch the bugs real GPUs hide. Two kernels with a
// planted missing barrier (a tree reduction and a scan) give wrong results under at least one
// schedule of the test matrix, while the correct kernels pass under every schedule and both
// warp sizes; barriers that not every thread reaches are reported as deadlocks with the line.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <numeric>
#include <span>
#include <vector>

#include "gpu/mma.h"
#include "planted_kernels.h"
#include "tessera/error.h"
#include "tessera/backend/registry.h"
#include "tessera/tessera.h"

using namespace tessera;
using namespace tessera::planted;

namespace {
TESSERA_GLOBAL void divergent_barrier(int* out) {
  if (gpu::thread_x() < 64) gpu::sync_threads();
  out[gpu::thread_x()] = 1;
}

struct Config {
  int warp;
  emu::Schedule schedule;
  uint64_t seed;
};
const Config kMatrix[] = {{32, emu::Schedule::forward, 1}, {64, emu::Schedule::forward, 1}, {32, emu::Schedule::reverse, 1},
                          {64, emu::Schedule::reverse, 1}, {32, emu::Schedule::random, 7}, {64, emu::Schedule::random, 7}};

template <class Run> int failing_configs(Run run) {
  int failures = 0;
  const emu::Settings saved = emu::settings();
  for (const Config& c : kMatrix) {
    emu::settings() = {c.warp, c.schedule, c.seed};
    failures += run() ? 0 : 1;
  }
  emu::settings() = saved;
  return failures;
}

bool sum_ok(bool buggy) {
  std::vector<int> in(kN);
  std::iota(in.begin(), in.end(), 1);
  int out = 0;
  if (buggy) gpu::launch(block_sum<true>, {1}, {kN}, 0, true, in.data(), &out);
  else gpu::launch(block_sum<false>, {1}, {kN}, 0, true, in.data(), &out);
  return out == static_cast<int>(kN * (kN + 1) / 2);
}

bool scan_ok(bool buggy) {
  std::vector<int> in(kN, 1), out(kN, 0);
  if (buggy) gpu::launch(inclusive_scan<true>, {1}, {kN}, 0, true, in.data(), out.data());
  else gpu::launch(inclusive_scan<false>, {1}, {kN}, 0, true, in.data(), out.data());
  for (unsigned i = 0; i < kN; ++i) {
    if (out[i] != static_cast<int>(i + 1)) return false;
  }
  return true;
}
}  // namespace

TEST_CASE("correct barrier kernels pass under every schedule and warp size") {
  CHECK(failing_configs([] { return sum_ok(false); }) == 0);
  CHECK(failing_configs([] { return scan_ok(false); }) == 0);
}

TEST_CASE("the schedule matrix catches a missing barrier in a reduction and in a scan") {
  const int reduction = failing_configs([] { return sum_ok(true); });
  const int scan = failing_configs([] { return scan_ok(true); });
  MESSAGE("missing barrier caught by " << reduction << "/6 configurations (reduction), " << scan << "/6 (scan)");
  CHECK(reduction > 0);
  CHECK(scan > 0);
}

TEST_CASE("a barrier skipped by some threads is reported with its source line") {
  std::vector<int> out(kN);
  CHECK_THROWS_WITH_AS(gpu::launch(divergent_barrier, {1}, {kN}, 0, true, out.data()),
                       doctest::Contains("deadlock: barrier at"), Error);
  CHECK_THROWS_WITH_AS(gpu::launch(divergent_barrier, {1}, {kN}, 0, false, out.data()),
                       doctest::Contains("launched without cooperative threads"), Error);
}

TEST_CASE("shared memory starts poisoned and out-of-bounds shared writes are detected") {
  static std::vector<float> seen(1);
  auto poisoned = [] {
    gpu::launch(+[](float* out) {
      TESSERA_SHARED_ARRAY(float, s, 4);
      if (gpu::thread_x() == 0) out[0] = s[2];  // never written: NaN, not a stale value
    }, {1}, {32}, 0, true, seen.data());
    return seen[0] != seen[0];
  };
  CHECK(poisoned());
  CHECK_THROWS_WITH_AS(gpu::launch(+[](int* unused) {
    (void)unused;
    TESSERA_SHARED_ARRAY(int, s, 4);
    if (gpu::thread_x() == 0) s[5] = 1;  // past the array: lands in its redzone
  }, {2}, {32}, 0, true, static_cast<int*>(nullptr)), doctest::Contains("redzone"), Error);
}

namespace {
TESSERA_GLOBAL void touch(int* out) {
  if (gpu::global_index() == 0) *out = 1;
}
}  // namespace

TEST_CASE("launches over a vendor's limits are rejected before they run") {
  int out = 0;
  // 2^23 blocks of 1024 threads: valid on CUDA (grid.x < 2^31), 2^33 work-items are over HIP's 2^32.
  CHECK_THROWS_WITH_AS(gpu::launch(touch, {1u << 23}, {1024}, 0, false, &out), doctest::Contains("HIP's limit"), Error);
  CHECK_NOTHROW(emu::check_launch_limits({1u << 23}, {1024}, 0, emu::LaunchLimits::cuda));
  CHECK_THROWS_WITH_AS(emu::check_launch_limits({1u << 23}, {1024}, 0, emu::LaunchLimits::hip), doctest::Contains("HIP's limit"), Error);
  // grid.y over 65535 is CUDA's limit (HIP allows it).
  CHECK_THROWS_WITH_AS(gpu::launch(touch, {1, 70000}, {32}, 0, false, &out), doctest::Contains("CUDA's grid limits"), Error);
  CHECK_NOTHROW(emu::check_launch_limits({1, 70000}, {32}, 0, emu::LaunchLimits::hip));
  CHECK_THROWS_WITH_AS(gpu::launch(touch, {1}, {1025}, 0, false, &out), doctest::Contains("1..1024 threads"), Error);
  CHECK_THROWS_WITH_AS(gpu::launch(touch, {1}, {1, 1, 65}, 0, false, &out), doctest::Contains("z <= 64"), Error);
  CHECK_THROWS_WITH_AS(gpu::launch(touch, {1}, {32}, 49 * 1024, true, &out), doctest::Contains("dynamic shared memory"), Error);
  CHECK(out == 0);  // nothing ran
  gpu::launch(touch, {1}, {32}, 0, false, &out);
  CHECK(out == 1);
}

TEST_CASE("a whole-tensor reduction of 16M elements spreads over many blocks and stays exact") {
  const Device dev(DeviceType::emulated, 0);
  const int64_t n = int64_t{1} << 24;
  const Tensor x = ones({n}, DType::f32, dev);
  emu::reset_launch_stats();
  const Tensor s = sum(x);
  CHECK(emu::launch_stats().max_blocks >= 132);  // an H100 has 132 SMs
  CHECK(emu::launch_stats().launches <= 2);      // two passes, no host round trip
  CHECK(s.item<float>() == static_cast<float>(n));
  const Tensor r = sum(ones({4, 1 << 20}, DType::f32, dev), {1});
  CHECK(emu::launch_stats().max_blocks >= 132);
  CHECK(r.to_vector<float>() == std::vector<float>(4, static_cast<float>(1 << 20)));
}

namespace {
// Stream a writes x; stream b reads it, with or without waiting for an event recorded on a.
bool stream_pipeline_ok(bool with_wait) {
  const Device dev(DeviceType::emulated, 0);
  Backend& backend = backend_for_device(dev, "test");
  auto a = backend.new_stream(0), b = backend.new_stream(0);
  Tensor x = zeros({4096}, DType::f32, dev), y;
  {
    StreamGuard guard(*a);
    x.fill_(1.0);
  }
  auto produced = backend.new_event(0);
  produced->record(*a);
  {
    StreamGuard guard(*b);
    if (with_wait) b->wait(*produced);
    y = mul(x, 2.0);
  }
  b->synchronize();
  const std::vector<float> got = y.to_vector<float>();
  a->synchronize();
  return got == std::vector<float>(4096, 2.0f);
}
}  // namespace

TEST_CASE("a missing stream wait reads stale data under some schedule, and with Stream::wait every schedule is right") {
  CHECK(failing_configs([] { return stream_pipeline_ok(true); }) == 0);
  CHECK(failing_configs([] { return stream_pipeline_ok(false); }) >= 1);
  CHECK(emu::pending_work() == 0);
}

TEST_CASE("two emulated devices: a kernel given another device's memory is rejected, ops set their device") {
  const Device d0(DeviceType::emulated, 0), d1(DeviceType::emulated, 1);
  REQUIRE(backend_for_device(d0, "test").device_count() >= 2);
  const Tensor on1 = zeros({64}, DType::i32, d1);
  CHECK(emu::owner(on1.data_ptr()) == 1);
  emu::current_device() = 0;
  CHECK_THROWS_WITH_AS(gpu::launch(touch, {1}, {32}, 0, false, static_cast<int*>(on1.data_ptr())),
                       doctest::Contains("launched on emulated:0 was given memory of emulated:1"), Error);
  CHECK(sum(ones({1000}, DType::f32, d1)).item<float>() == 1000.0f);  // the dispatcher makes d1 current
  CHECK(emu::current_device() == 0);                                // and restores the caller's device
  CHECK(add(ones({3}, DType::f32, d1), 1.0).to(d0).to_vector<float>() == std::vector<float>(3, 2.0f));
  CHECK_THROWS_WITH_AS(add(ones({3}, DType::f32, d0), ones({3}, DType::f32, d1)), doctest::Contains("expected all tensors on one device"),
                       Error);
}

namespace {
TESSERA_GLOBAL void copy_coalesced(int64_t n, const float* in, float* out) {
  for (int64_t i = gpu::global_index(); i < n; i += gpu::grid_stride()) out[i] = in[i];
}
// Each thread walks its own row of 64 floats: lanes of a warp are 256 bytes apart.
TESSERA_GLOBAL void copy_row_per_thread(int64_t rows, const float* in, float* out) {
  for (int64_t r = gpu::global_index(); r < rows; r += gpu::grid_stride()) {
    for (int64_t j = 0; j < 64; ++j) out[r * 64 + j] = in[r * 64 + j];
  }
}

emu::access::KernelCounters counted(const std::function<void()>& run) {
  emu::access::reset();
  emu::access::set_enabled(true);
  run();
  emu::access::set_enabled(false);
  const auto all = emu::access::snapshot();
  REQUIRE(all.size() == 1);
  return all[0];
}
}  // namespace

TEST_CASE("access counters: a coalesced copy uses every sector byte, a row per thread wastes most of each") {
#if defined(TESSERA_EMU_ACCESS_COUNTERS)
  const int64_t n = 64 * 1024;
  // Aligned like device allocations (a malloc'd vector is only 16-byte aligned: 5 sectors per warp of floats).
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> in_buf(static_cast<float*>(std::aligned_alloc(256, n * 4))), out_buf(static_cast<float*>(std::aligned_alloc(256, n * 4)));
  std::span<float> in(in_buf.get(), n), out(out_buf.get(), n);
  std::fill(in.begin(), in.end(), 1.0f);
  std::fill(out.begin(), out.end(), 0.0f);
  for (int warp : {32, 64}) {
    const emu::Settings saved = emu::settings();
    emu::settings().warp_size = warp;
    const auto good = counted([&] { gpu::launch(copy_coalesced, {64}, {256}, 0, false, n, in.data(), out.data()); });
    CHECK(good.efficiency() == doctest::Approx(1.0));
    CHECK(good.loads.bytes == n * 4);
    CHECK(good.stores.bytes == n * 4);
    CHECK(good.sectors_per_request() == doctest::Approx(warp / 8.0));  // 4 bytes x warp lanes / 32
    const auto bad = counted([&] { gpu::launch(copy_row_per_thread, {4}, {256}, 0, false, n / 64, in.data(), out.data()); });
    CHECK(bad.efficiency() == doctest::Approx(4.0 / 32.0));  // one float of each 32-byte sector per request
    CHECK(bad.loads.bytes == n * 4);
    emu::settings() = saved;
  }
  CHECK(std::equal(out.begin(), out.end(), in.begin()));
#else
  MESSAGE("access counters are not compiled in (GCC builds without sanitizers have them)");
#endif
}

// ---- tensor-core fragments: one warp multiplies a 16 x 16 A by a 16 x N B through mma.h ----
namespace {
template <class Shape, bool kSwapA>
TESSERA_GLOBAL void warp_mma(const BFloat16* a, const BFloat16* b, float* c) {
  const int ln = gpu::lane();
  BFloat16 fa[Shape::A], fb[Shape::B];
  float acc[Shape::C] = {};
  // The planted bug: A's fragment read with row and column exchanged (a lane-ownership mix-up
  // that compiles fine and runs on any GPU).
  for (int i = 0; i < Shape::A; ++i) {
    fa[i] = kSwapA ? a[Shape::a_col(ln, i) * 16 + Shape::a_row(ln, i)] : a[Shape::a_row(ln, i) * 16 + Shape::a_col(ln, i)];
  }
  for (int i = 0; i < Shape::B; ++i) fb[i] = b[Shape::b_row(ln, i) * Shape::N + Shape::b_col(ln, i)];
  gpu::mma<Shape, BFloat16>(acc, fa, fb);
  for (int i = 0; i < Shape::C; ++i) c[Shape::c_row(ln, i) * Shape::N + Shape::c_col(ln, i)] = acc[i];
}

template <class Shape> double mma_max_error(bool swap) {
  std::vector<BFloat16> a(16 * 16), b(16 * Shape::N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = BFloat16(static_cast<float>((i * 7) % 13) - 6.0f);
  for (size_t i = 0; i < b.size(); ++i) b[i] = BFloat16(static_cast<float>((i * 5) % 11) - 5.0f);
  std::vector<float> c(16 * Shape::N, -1.0f);
  if (swap) gpu::launch(warp_mma<Shape, true>, {1}, {Shape::Warp}, 0, true, a.data(), b.data(), c.data());
  else gpu::launch(warp_mma<Shape, false>, {1}, {Shape::Warp}, 0, true, a.data(), b.data(), c.data());
  double worst = 0;
  for (int r = 0; r < 16; ++r) {
    for (int j = 0; j < Shape::N; ++j) {
      double want = 0;
      for (int k = 0; k < 16; ++k) want += static_cast<double>(static_cast<float>(a[r * 16 + k])) * static_cast<float>(b[k * Shape::N + j]);
      worst = std::max(worst, std::abs(want - c[r * Shape::N + j]));
    }
  }
  return worst;
}
}  // namespace

TEST_CASE("tensor-core fragments: the emulated MMA follows each lane's ownership, so a lane mix-up gives a wrong product") {
  const emu::Settings saved = emu::settings();
  emu::settings().warp_size = 32;
  CHECK(mma_max_error<gpu::MmaSync16x8x16>(false) == 0.0);  // small integers: exact in f32
  CHECK(mma_max_error<gpu::MmaSync16x8x16>(true) > 1.0);
  emu::settings().warp_size = 64;
  CHECK(mma_max_error<gpu::Mfma16x16x16>(false) == 0.0);
  CHECK(mma_max_error<gpu::Mfma16x16x16>(true) > 1.0);
  // A shape on the wrong warp width is refused, as the instruction does not exist there.
  CHECK_THROWS_WITH_AS(mma_max_error<gpu::MmaSync16x8x16>(false), doctest::Contains("needs 32-lane warps"), Error);
  emu::settings() = saved;
}
