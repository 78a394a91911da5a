// The trace profiler on each backend: op spans with shapes, bytes and FLOPs, autograd nodes and
// user scopes nested on the calling thread's track, memory counters, device-stream tracks where
// the backend has a device timeline, self times in the summary, and the Chrome JSON.
#include <nlohmann/json.hpp>

#include "support/checks.h"
#include "tessera/profiler.h"

using namespace tessera;
using namespace tessera::test;

namespace {
const profile::Span* find_span(const profile::Trace& t, const std::string& name, const std::string& category) {
  for (const auto& s : t.spans) {
    if (s.name == name && s.category == category) return &s;
  }
  return nullptr;
}
}  // namespace

TEST_CASE("the profiler records ops, autograd nodes, scopes and memory, nested per track") {
  Tensor a = randn({64, 32}, DType::f32, device()).set_requires_grad();
  Tensor b = randn({32, 16}, DType::f32, device());
  (void)matmul(a, b);  // warm-up outside the profile: nothing of it may appear
  profile::start();
  CHECK(profile::recording());
  TESSERA_CHECK_THROWS_WITH(profile::start(), "profile::start: a profile is already recording");
  {
    const profile::Scope outer("my step", "step");
    Tensor y = matmul(a, b);
    sum(relu(y)).backward();
    (void)y.to(kCPU);  // waits for the device: every device span is complete
  }
  const profile::Trace t = profile::stop();
  CHECK_FALSE(profile::recording());
  TESSERA_CHECK_THROWS_WITH(profile::stop(), "profile::stop: no profile is recording");

  const profile::Span* step = find_span(t, "my step", "step");
  const profile::Span* mm = find_span(t, "matmul", "op");
  const profile::Span* node = find_span(t, "matmul backward", "autograd");
  REQUIRE(step != nullptr);
  REQUIRE(mm != nullptr);
  REQUIRE(node != nullptr);
  CHECK(mm->track == step->track);
  CHECK(step->begin_ns <= mm->begin_ns);
  CHECK(mm->end_ns <= step->end_ns);
  CHECK(node->begin_ns >= mm->end_ns);
  CHECK(node->end_ns <= step->end_ns);
  CHECK(t.wall_ms * 1e6 >= static_cast<double>(step->end_ns - step->begin_ns));
  // The forward matmul's arguments: shapes, dtype, backend, bytes and 2*M*N*K FLOPs.
  const auto args = nlohmann::json::parse("{" + mm->args_json + "}");
  CHECK(args["inputs"] == nlohmann::json::parse("[[64, 32], [32, 16]]"));
  CHECK(args["outputs"] == nlohmann::json::parse("[[64, 16]]"));
  CHECK(args["dtype"] == "float32");
  CHECK(args["device"] == device().str());
  CHECK(args["bytes"] == (64 * 32 + 32 * 16 + 64 * 16) * 4);
  CHECK(args["flops"].get<double>() == 2.0 * 64 * 16 * 32);
  // Memory: the allocator's in-use bytes as a counter of this device.
  const std::string counter = "memory " + device().str();
  CHECK(std::any_of(t.counters.begin(), t.counters.end(), [&](const profile::CounterSample& c) { return c.name == counter && c.value > 0; }));
  // Device streams: a track of their own with device-time spans, on every backend that records
  // profiler events (emulated, CUDA, HIP).
  const void* tag = nullptr;
  const bool device_timeline = find_backend(device().type)->record_profiler_event(device().index, &tag) != nullptr;
  const profile::Span* on_device = find_span(t, "matmul", "device");
  CHECK((on_device != nullptr) == device_timeline);
  if (on_device) CHECK(on_device->track != step->track);

  // Spans are ordered per track and nest: each one inside the open span before it or after it.
  for (size_t i = 1; i < t.spans.size(); ++i) {
    const auto& p = t.spans[i - 1];
    const auto& s = t.spans[i];
    if (p.track != s.track) continue;
    CHECK(p.begin_ns <= s.begin_ns);
  }
  // Summary: the step's self time is its duration less its direct children's.
  const auto summary = t.summary();
  const auto it = std::find_if(summary.begin(), summary.end(), [](const profile::OpSummary& o) { return o.name == "my step"; });
  REQUIRE(it != summary.end());
  CHECK(it->calls == 1);
  CHECK(it->self_ms < it->total_ms);
  CHECK(it->self_ms >= 0);
  CHECK(t.summary_table().find("matmul") != std::string::npos);

  // Chrome JSON: every span and counter as an event, and the track names.
  const auto doc = nlohmann::json::parse(t.chrome_json());
  size_t spans = 0, counters = 0;
  for (const auto& e : doc["traceEvents"]) {
    spans += e["ph"] == "X";
    counters += e["ph"] == "C";
  }
  CHECK(spans == t.spans.size());
  CHECK(counters == t.counters.size());
  CHECK(doc["traceEvents"].dump().find("main thread") != std::string::npos);

  // A second profile starts empty.
  profile::start();
  const profile::Trace empty = profile::stop();
  CHECK(empty.spans.empty());
  TESSERA_CHECK_THROWS_WITH(t.write_chrome_json("/nonexistent-dir/trace.json"), "profile: cannot write the trace to '/nonexistent-dir/trace.json'");
}
