// Recording for the trace profiler (tessera/profiler.h): per-thread buffers that the recording
// threads append to without contention (each has its own mutex, taken by stop() once), and the
// device events of kernel launches, resolved into device-time spans at stop().
#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>

#include "profiler_internal.h"
#include "tessera/backend/registry.h"
#include "tessera/error.h"
#include "tessera/graph.h"
#include "tessera/telemetry.h"
#include "tessera/tensor.h"

namespace tessera::profile {
namespace detail {

std::atomic<bool> g_recording{false};
std::atomic<bool> g_track_scopes{false};

namespace {

using Clock = std::chrono::steady_clock;

int64_t clock_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

std::atomic<int64_t> g_origin_ns{0};
std::atomic<uint64_t> g_generation{0};

struct PendingDevice {
  std::string name, args;
  Backend* backend = nullptr;
  int device = 0;
  const void* stream = nullptr;
  std::unique_ptr<Event> begin, end;
  int64_t host_begin_ns = 0;
};

struct ThreadBuffer {
  std::mutex mutex;
  uint64_t generation = 0;
  std::thread::id thread;
  int index = 0;  // creation order: the track id
  std::string label;  // the track's name when not the main thread ("telemetry")
  std::vector<Span> spans;
  std::vector<CounterSample> counters;
  std::vector<PendingDevice> device;
  void refresh(uint64_t gen) {
    if (generation == gen) return;
    spans.clear(), counters.clear(), device.clear();
    generation = gen;
  }
};

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::thread::id starter;
  std::array<std::pair<RangePush, RangePop>, 4> annotators{};
  std::atomic<int> annotator_count{0};
};
// Never destroyed: worker threads may record (and exit) after static destruction began.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

ThreadBuffer& buffer() {
  thread_local std::shared_ptr<ThreadBuffer> mine = [] {
    auto b = std::make_shared<ThreadBuffer>();
    b->thread = std::this_thread::get_id();
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    b->index = static_cast<int>(r.buffers.size()) + 1;
    r.buffers.push_back(b);
    return b;
  }();
  return *mine;
}

template <class F> void with_buffer(F&& f) {
  ThreadBuffer& b = buffer();
  std::lock_guard lock(b.mutex);
  b.refresh(g_generation.load(std::memory_order_acquire));
  f(b);
}

void append_shapes(std::string& out, std::span<const Tensor> ts) {
  out += '[';
  bool first = true;
  for (const Tensor& t : ts) {
    if (!first) out += ", ";
    first = false;
    if (!t.defined()) {
      out += "null";
      continue;
    }
    out += '[';
    for (size_t i = 0; i < t.shape().size(); ++i) out += (i ? ", " : "") + std::to_string(t.shape()[i]);
    out += ']';
  }
  out += ']';
}

int64_t bytes_of(std::span<const Tensor> ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) {
    if (t.defined()) n += t.numel() * static_cast<int64_t>(itemsize(t.dtype()));
  }
  return n;
}

}  // namespace

int64_t now_ns() { return clock_ns() - g_origin_ns.load(std::memory_order_relaxed); }

void add_span(std::string name, const char* category, int64_t begin_ns, int64_t end_ns, std::string args_json) {
  with_buffer([&](ThreadBuffer& b) {
    b.spans.push_back(Span{std::move(name), category, begin_ns, end_ns, b.index, std::move(args_json)});
  });
}

void add_counter(const std::string& name, double value) {
  const int64_t t = now_ns();
  with_buffer([&](ThreadBuffer& b) { b.counters.push_back(CounterSample{name, t, value}); });
}

void register_annotator(RangePush push, RangePop pop) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const int n = r.annotator_count.load();
  for (int i = 0; i < n; ++i) {
    if (r.annotators[static_cast<size_t>(i)].first == push) return;  // one per library
  }
  if (n == static_cast<int>(r.annotators.size())) return;
  r.annotators[static_cast<size_t>(n)] = {push, pop};
  r.annotator_count.store(n + 1, std::memory_order_release);
}

void annotate_push(const char* name) {
  Registry& r = registry();
  const int n = r.annotator_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) r.annotators[static_cast<size_t>(i)].first(name);
}

void annotate_pop() {
  Registry& r = registry();
  const int n = r.annotator_count.load(std::memory_order_acquire);
  for (int i = n - 1; i >= 0; --i) r.annotators[static_cast<size_t>(i)].second();
}

double kernel_flops(OpId op, std::span<const Tensor> in, std::span<Tensor> out) {
  const auto numel = [](const Tensor& t) { return t.defined() ? static_cast<double>(t.numel()) : 0.0; };
  const auto per_output_channel = [&](const Tensor& w) { return w.size(0) > 0 ? numel(w) / static_cast<double>(w.size(0)) : 0.0; };
  switch (op) {
    case OpId::Matmul:
    case OpId::Linear:
      return 2.0 * numel(out[0]) * static_cast<double>(in[0].size(-1));
    case OpId::Conv2d:
      return 2.0 * numel(out[0]) * per_output_channel(in[1]);
    case OpId::Conv2dInputGrad:
      return 2.0 * numel(in[0]) * per_output_channel(in[1]);
    case OpId::Conv2dWeightGrad:
      return 2.0 * numel(in[0]) * per_output_channel(out[0]);
    case OpId::Attention:  // QK^T and PV, causal masking not discounted
      return 2.0 * static_cast<double>(in[0].size(0) * in[0].size(1) * in[1].size(1)) * static_cast<double>(in[0].size(2) + in[2].size(2));
    case OpId::AttentionBackward:  // S recomputed, dV, dP, dQ, dK: 2.5x the forward
      return 5.0 * static_cast<double>(in[1].size(0) * in[1].size(1) * in[2].size(1)) * static_cast<double>(in[1].size(2) + in[3].size(2));
    default:
      return 0.0;
  }
}

KernelSpan::KernelSpan(OpId op, Backend& backend, Device device, std::span<const Tensor> inputs, std::span<Tensor> outputs)
    : name_(op_name(op).data()), backend_(backend), device_(device) {
  if (!on()) {
    begin_ns_ = -1;
    return;
  }
  const DType dtype = !outputs.empty() && outputs[0].defined() ? outputs[0].dtype() : (!inputs.empty() && inputs[0].defined() ? inputs[0].dtype() : DType::f32);
  args_ = "\"inputs\": ";
  append_shapes(args_, inputs);
  args_ += ", \"outputs\": ";
  append_shapes(args_, std::span<const Tensor>(outputs.data(), outputs.size()));
  args_ += ", \"dtype\": \"" + std::string(dtype_name(dtype)) + "\", \"backend\": \"" + backend.name() + "\", \"device\": \"" + device.str() + "\"";
  args_ += ", \"bytes\": " + std::to_string(bytes_of(inputs) + bytes_of(std::span<const Tensor>(outputs.data(), outputs.size())));
  std::ostringstream flops;
  flops << kernel_flops(op, inputs, outputs);
  args_ += ", \"flops\": " + flops.str();
  annotate_push(name_);
  // Not while capturing a graph: an event recorded into the graph is not a time anyone waits for.
  if (!tessera::detail::graph_capturing()) {
    const void* tag = nullptr;
    device_begin_ = backend.record_profiler_event(device.index, &tag);
    stream_ = tag;
  }
  begin_ns_ = now_ns();
}

KernelSpan::~KernelSpan() {
  if (begin_ns_ < 0) return;
  const int64_t end = now_ns();
  annotate_pop();
  std::unique_ptr<Event> device_end;
  if (device_begin_) {
    const void* tag = nullptr;
    device_end = backend_.record_profiler_event(device_.index, &tag);
  }
  with_buffer([&](ThreadBuffer& b) {
    if (device_begin_ && device_end) {
      b.device.push_back(PendingDevice{name_, args_, &backend_, device_.index, stream_, std::move(device_begin_), std::move(device_end), begin_ns_});
    }
    b.spans.push_back(Span{name_, "op", begin_ns_, end, b.index, std::move(args_)});
  });
}

namespace {

// Device spans of one profile: per (backend, device) the first launch anchors the device clock
// to the host's (a kernel starts no earlier than its launch), then every event is placed by its
// elapsed time from that first one. One track per stream.
void resolve_device_spans(std::vector<PendingDevice>& pending, Trace& trace, int first_track) {
  std::sort(pending.begin(), pending.end(), [](const PendingDevice& a, const PendingDevice& b) { return a.host_begin_ns < b.host_begin_ns; });
  std::map<std::pair<Backend*, int>, const PendingDevice*> anchors;
  std::map<std::tuple<Backend*, int, const void*>, int> tracks;
  for (const PendingDevice& p : pending) {
    try {
      p.end->synchronize();
    } catch (const std::exception&) {
      continue;  // a device that failed meanwhile: its spans are lost, not the trace
    }
    auto [anchor_it, fresh] = anchors.emplace(std::make_pair(p.backend, p.device), &p);
    const PendingDevice& anchor = *anchor_it->second;
    (void)fresh;
    double begin_ms = 0, dur_ms = 0;
    try {
      begin_ms = &anchor == &p ? 0.0 : p.begin->elapsed_ms(*anchor.begin);
      dur_ms = p.end->elapsed_ms(*p.begin);
    } catch (const std::exception&) {
      continue;
    }
    const auto key = std::make_tuple(p.backend, p.device, p.stream);
    auto [track_it, new_track] = tracks.emplace(key, first_track + static_cast<int>(tracks.size()));
    if (new_track) {
      std::ostringstream name;
      name << p.backend->name() << ":" << p.device << " stream ";
      if (p.stream) name << p.stream;
      else name << "default";
      trace.tracks.push_back(Track{track_it->second, name.str()});
    }
    const int64_t begin = anchor.host_begin_ns + static_cast<int64_t>(begin_ms * 1e6);
    trace.spans.push_back(Span{p.name, "device", begin, begin + static_cast<int64_t>(dur_ms * 1e6), track_it->second, p.args});
  }
}

// Telemetry as counter tracks while recording: the host process's resident memory and CPU use
// and, where NVML or ROCm SMI loaded, each GPU's utilisation, memory, power and temperature,
// every 50 ms on a thread of its own.
class Sampler {
 public:
  void start() {
    stop_ = false;
    thread_ = std::thread([this] { run(); });
  }
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void sample() {
    const telemetry::HostReading h = telemetry::host();
    add_counter("host resident bytes", static_cast<double>(h.rss_bytes));
    add_counter("host cpu %", h.cpu_utilization_pct);
    for (const telemetry::GpuSource& s : gpus_) {
      const telemetry::GpuSource now = s.name == "nvml" ? telemetry::nvml(s.library) : telemetry::rocm_smi(s.library);
      for (const auto& d : now.devices) {
        const std::string at = s.name + ":" + std::to_string(d.index) + " ";
        if (d.utilization_pct) add_counter(at + "utilization %", *d.utilization_pct);
        if (d.memory_used_bytes) add_counter(at + "memory used bytes", *d.memory_used_bytes);
        if (d.power_w) add_counter(at + "power W", *d.power_w);
        if (d.temperature_c) add_counter(at + "temperature C", *d.temperature_c);
      }
    }
  }
  void run() {
    with_buffer([](ThreadBuffer& b) { b.label = "telemetry"; });
    gpus_.clear();
    for (telemetry::GpuSource s : {telemetry::nvml(), telemetry::rocm_smi()}) {
      if (s.available) gpus_.push_back(std::move(s));
    }
    std::unique_lock lock(mutex_);
    while (!stop_) {
      lock.unlock();
      sample();
      lock.lock();
      wake_.wait_for(lock, std::chrono::milliseconds(50), [this] { return stop_; });
    }
    lock.unlock();
    sample();  // the last reading at the end of the profile
  }
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::vector<telemetry::GpuSource> gpus_;
};

Sampler& sampler() {
  static Sampler* s = new Sampler;
  return *s;
}

}  // namespace
}  // namespace detail

bool recording() { return detail::on(); }
bool scopes_active() { return detail::on() || detail::g_track_scopes.load(std::memory_order_relaxed); }

namespace {
thread_local std::vector<const std::string*> t_scope_names;  // the open Scopes' names, outermost first
}  // namespace

std::string scope_path() {
  std::string path;
  for (const std::string* n : t_scope_names) path += (path.empty() ? "" : " > ") + *n;
  return path;
}

void start() {
  detail::Registry& r = detail::registry();
  std::lock_guard lock(r.mutex);
  TESSERA_CHECK(!detail::on(), "profile::start", "a profile is already recording");
  r.starter = std::this_thread::get_id();
  detail::g_generation.fetch_add(1, std::memory_order_acq_rel);
  detail::g_origin_ns.store(detail::clock_ns(), std::memory_order_relaxed);
  detail::g_recording.store(true, std::memory_order_release);
  detail::sampler().start();
}

Trace stop() {
  TESSERA_CHECK(detail::on(), "profile::stop", "no profile is recording (call profile::start first)");
  detail::sampler().stop();
  detail::Registry& r = detail::registry();
  Trace trace;
  std::vector<detail::PendingDevice> pending;
  {
    std::lock_guard lock(r.mutex);
    detail::g_recording.store(false, std::memory_order_release);
    trace.wall_ms = static_cast<double>(detail::now_ns()) / 1e6;
    const uint64_t gen = detail::g_generation.load();
    int workers = 0;
    for (const auto& b : r.buffers) {
      std::lock_guard block(b->mutex);
      if (b->generation != gen) continue;
      if (b->spans.empty() && b->counters.empty() && b->device.empty()) continue;
      const bool main = b->thread == r.starter;
      trace.tracks.push_back(Track{b->index, main ? "main thread" : !b->label.empty() ? b->label : "thread " + std::to_string(++workers)});
      std::move(b->spans.begin(), b->spans.end(), std::back_inserter(trace.spans));
      std::move(b->counters.begin(), b->counters.end(), std::back_inserter(trace.counters));
      std::move(b->device.begin(), b->device.end(), std::back_inserter(pending));
      b->spans.clear(), b->counters.clear(), b->device.clear();
    }
  }
  detail::resolve_device_spans(pending, trace, 1000);
  std::sort(trace.spans.begin(), trace.spans.end(), [](const Span& a, const Span& b) {
    return std::tie(a.track, a.begin_ns, b.end_ns) < std::tie(b.track, b.begin_ns, a.end_ns);
  });
  std::stable_sort(trace.counters.begin(), trace.counters.end(), [](const CounterSample& a, const CounterSample& b) { return a.t_ns < b.t_ns; });
  std::sort(trace.tracks.begin(), trace.tracks.end(), [](const Track& a, const Track& b) { return a.id < b.id; });
  return trace;
}

void Scope::begin(std::string name, const char* category) {
  active_ = true;
  name_ = std::move(name);
  category_ = category;
  t_scope_names.push_back(&name_);
  if (!detail::on()) return;
  recorded_ = true;
  detail::annotate_push(name_.c_str());
  begin_ns_ = detail::now_ns();
}

Scope::Scope(const char* name, const char* category) {
  if (scopes_active()) begin(name, category);
}
Scope::Scope(std::string name, const char* category) {
  if (scopes_active()) begin(std::move(name), category);
}

Scope::~Scope() {
  if (!active_) return;
  if (!t_scope_names.empty() && t_scope_names.back() == &name_) t_scope_names.pop_back();
  if (!recorded_) return;
  const int64_t end = detail::now_ns();
  detail::annotate_pop();
  detail::add_span(std::move(name_), category_, begin_ns_, end);
}

}  // namespace tessera::profile
