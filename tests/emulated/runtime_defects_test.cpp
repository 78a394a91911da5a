// The device runtime's launch, stream, copy and error rules, held by the emulator as hardware
// holds them: a block fits the kernels' launch bound; a stream belongs to its device; a copy
// between devices is ordered on the current streams; an error latched by an earlier call is not
// blamed on the next launch; a device error is read only after the stream that raised it was
// waited for. Each case fails with its fix
// reverted (in the emulator and in backends/gpu/device_backend.cu, which share the rules).
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "emulated/execution.h"
#include "gpu/runtime.h"
#include "ops/dispatch.h"
#include "emulated/streams.h"
#include "tessera/backend/registry.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {
const Device kDev0(DeviceType::emulated, 0), kDev1(DeviceType::emulated, 1);

Tensor on(Device d, const std::vector<float>& v) { return from_vector<float>(v, {static_cast<int64_t>(v.size())}).to(d); }

TESSERA_GLOBAL void count_threads_kernel(int* n) { gpu::atomic_add(n, 1); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}
}  // namespace

TEST_CASE("a stream belongs to the device it was created on: work for another device is refused") {
  if (backend_for(DeviceType::emulated).device_count() < 2) return;
  emu::Queue q(0);
  const int saved = emu::current_device();
  emu::current_device() = 1;
  const std::string e = error_of([&] { emu::submit(&q, [] {}); });
  emu::current_device() = saved;
  CHECK(e.find("invalid resource handle") != std::string::npos);
  // A StreamGuard on emulated:0 leaves emulated:1's current stream alone: its ops still run.
  auto s0 = backend_for(DeviceType::emulated).new_stream(0);
  const Tensor b = on(kDev1, {1, 2, 3});
  {
    StreamGuard guard(*s0);
    const Tensor c = mul(b, 2.0);
    CHECK(c.to_vector<float>() == std::vector<float>{2, 4, 6});
  }
  auto s1 = backend_for(DeviceType::emulated).new_stream(1);
  CHECK(error_of([&] { backend_for(DeviceType::emulated).set_current_stream(0, s1.get()); }).find("made current on emulated:0") !=
        std::string::npos);
}

TEST_CASE("a copy between devices is ordered after the destination stream's queued work, not at once") {
  if (backend_for(DeviceType::emulated).device_count() < 2) return;
  auto s1 = backend_for(DeviceType::emulated).new_stream(1);
  auto s0 = backend_for(DeviceType::emulated).new_stream(0);
  // Newest stream first: draining the source stream does not happen to run s1's work too.
  const emu::Settings saved = emu::settings();
  emu::settings().schedule = emu::Schedule::reverse;
  const Tensor a = full({1024}, 10.0, DType::f32, kDev0);
  Tensor c;
  {
    StreamGuard guard0(*s0), guard(*s1);  // both devices on user streams: nothing drains s1 by accident
    Tensor b = mul(ones({1024}, DType::f32, kDev1), 1.0);  // a 4 KiB block of s1's pool
    const void* b_block = b.data_ptr();
    c = mul(b, 2.0);     // queued on s1: reads b later
    b = Tensor();        // freed: s1 may reuse the block at once (stream order)
    const Tensor moved = a.to(kDev1);  // the peer copy gets that block: it must wait for c's read
    CHECK(moved.data_ptr() == b_block);
    s1->synchronize();
    CHECK(moved.to_vector<float>() == std::vector<float>(1024, 10.0f));
  }
  CHECK(c.to_vector<float>() == std::vector<float>(1024, 2.0f));
  emu::settings() = saved;
  // And after the source stream's queued writes.
  Tensor src = on(kDev0, {1, 1, 1});
  Tensor dst = on(kDev1, {0, 0, 0});
  {
    StreamGuard guard(*s0);
    src.add_(on(kDev0, {1, 2, 3}));  // queued on s0
    dst.copy_(src);
  }
  CHECK(dst.to_vector<float>() == std::vector<float>{2, 3, 4});
  s0->synchronize();
}

TEST_CASE("an error latched by an earlier call is not blamed on the next kernel launch") {
  const Tensor x = on(kDev0, {1, 2, 3});
  emu::set_last_error(emu::LastError::not_ready, "event query: not ready");  // event polling on ROCm 7 latches this
  CHECK(add(x, 1.0).to_vector<float>() == std::vector<float>{2, 3, 4});
  emu::set_last_error(emu::LastError::failure, "cudaMemcpyAsync: invalid argument");
  const std::string e = error_of([&] { (void)add(x, 1.0); });
  CHECK(e.find("an earlier call failed") != std::string::npos);
  CHECK(e.find("cudaMemcpyAsync: invalid argument") != std::string::npos);
  CHECK(add(x, 1.0).to_vector<float>() == std::vector<float>{2, 3, 4});  // reported once, then gone
}

TEST_CASE("a device error is read after its own stream was waited for, and not lost to another stream's sync") {
  auto s = backend_for(DeviceType::emulated).new_stream(0);
  const Tensor x = on(kDev0, {1, 2, 3});
  const Tensor bad = from_vector<int64_t>({0, 7}, {2}).to(kDev0);
  const Tensor other = on(kDev0, {5});
  {
    StreamGuard guard(*s);
    (void)index_select(x, 0, bad);  // queued on s; the kernel reports index 7 out of range
  }
  CHECK(other.to_vector<float>() == std::vector<float>{5});  // a default-stream read: not s's error to raise
  const std::string e = error_of([&] { s->synchronize(); });
  CHECK(e.find("index 7 is out of range") != std::string::npos);
  CHECK(error_of([&] { synchronize(kDev0); }).empty());  // raised once
}

TEST_CASE("a block larger than the kernels' launch bound is refused, as on hardware") {
  int threads = 0;
  const auto launch_with = [&](unsigned block) {
    return error_of([&] { gpu::launch(count_threads_kernel, gpu::Grid{1}, gpu::Grid{block}, 0, false, &threads); });
  };
  CHECK(launch_with(gpu::kMaxBlockThreads).empty());
  CHECK(threads == static_cast<int>(gpu::kMaxBlockThreads));
  CHECK(launch_with(2 * gpu::kMaxBlockThreads).find("too many resources requested for launch") != std::string::npos);
  CHECK(threads == static_cast<int>(gpu::kMaxBlockThreads));  // nothing ran
}

// The emulator's device memory is host memory, so a CPU kernel handed a device tensor reads it
// and "works"; on an H200 the same call (cross_entropy with cpu logits and a device target)
// crashed the process. The dispatcher refuses any operand on another device, whatever the op.
TEST_CASE("a kernel given an operand on another device is refused before it runs, as hardware would fault") {
  const Tensor host_logits = ones({2, 3});
  const Tensor dev_target = from_vector<int64_t>({1, 0}, {2}).to(kDev0);
  const std::string ce = error_of([&] { (void)cross_entropy(host_logits, dev_target); });
  CHECK(ce.find("cross_entropy: ") == 0);
  CHECK(ce.find("cpu") != std::string::npos);
  CHECK(ce.find("emulated:0") != std::string::npos);
  // The floor under every op: run_kernel itself, whatever checks the op made first.
  const Tensor a = ones({4}), b = ones({4}).to(kDev0);
  Tensor out = empty({4});
  const Tensor in[2] = {a, b};
  const std::string add_err = error_of([&] { detail::run_kernel(OpId::Add, kCPU, in, std::span<Tensor>(&out, 1), OpAttrs{}); });
  CHECK(add_err.find("add: expected all tensors on cpu") == 0);
  Tensor dev_out = empty({4}, DType::f32, kDev0);
  const Tensor host_in[2] = {a, a};
  CHECK(error_of([&] { detail::run_kernel(OpId::Add, kCPU, host_in, std::span<Tensor>(&dev_out, 1), OpAttrs{}); }).find("emulated:0") != std::string::npos);
}
