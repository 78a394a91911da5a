// A recorded profile as Chrome trace-event JSON (the format Perfetto and chrome://tracing
// open: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU) and as
// a per-name summary with self times.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "tessera/error.h"
#include "tessera/profiler.h"

namespace tessera::profile {
namespace {

// Host threads are process 1, device streams process 2: Perfetto groups tracks by process.
constexpr int kDeviceTrackBase = 1000;
int pid_of(int track) { return track >= kDeviceTrackBase ? 2 : 1; }

void append_string(std::string& out, std::string_view s) {
  out += '"';
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\', out += ch;
    else if (static_cast<unsigned char>(ch) < 0x20) out += ' ';
    else out += ch;
  }
  out += '"';
}

// Microseconds with nanosecond resolution (the format's unit is the microsecond).
std::string micros(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ns) / 1000.0);
  return buf;
}

std::string number(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

}  // namespace

std::string Trace::chrome_json() const {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"wall_ms\": " + number(wall_ms) + "}, \"traceEvents\": [\n";
  out += R"J({"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "tessera (host threads)"}})J";
  out += ",\n" R"J({"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "tessera (device streams)"}})J";
  for (const Track& t : tracks) {
    out += ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + std::to_string(pid_of(t.id)) + ", \"tid\": " + std::to_string(t.id) +
           ", \"args\": {\"name\": ";
    append_string(out, t.name);
    out += "}}";
  }
  for (const Span& s : spans) {
    out += ",\n{\"ph\": \"X\", \"name\": ";
    append_string(out, s.name);
    out += ", \"cat\": ";
    append_string(out, s.category);
    out += ", \"pid\": " + std::to_string(pid_of(s.track)) + ", \"tid\": " + std::to_string(s.track) + ", \"ts\": " + micros(s.begin_ns) +
           ", \"dur\": " + micros(s.end_ns - s.begin_ns) + ", \"args\": {" + s.args_json + "}}";
  }
  for (const CounterSample& c : counters) {
    out += ",\n{\"ph\": \"C\", \"name\": ";
    append_string(out, c.name);
    out += ", \"pid\": 1, \"tid\": 0, \"ts\": " + micros(c.t_ns) + ", \"args\": {\"value\": " + number(c.value) + "}}";
  }
  out += "\n]}\n";
  return out;
}

void Trace::write_chrome_json(const std::string& path) const {
  // Written beside the target and renamed: a failed write never leaves half a trace behind.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    TESSERA_CHECK(f.good(), "profile", "cannot write the trace to '", path, "'");
    f << chrome_json();
    f.flush();
    TESSERA_CHECK(f.good(), "profile", "writing the trace to '", path, "' failed");
  }
  TESSERA_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "profile", "cannot move the trace into place at '", path, "'");
}

std::vector<OpSummary> Trace::summary() const {
  std::map<std::pair<std::string, std::string>, OpSummary> by_name;
  // Spans are sorted by (track, begin, longer first): a stack of open spans per track gives each
  // span's parent, whose self time loses the child's duration.
  std::vector<std::pair<const Span*, OpSummary*>> open;
  int track = -1;
  for (const Span& s : spans) {
    if (s.category == "device") continue;
    if (s.track != track) open.clear(), track = s.track;
    while (!open.empty() && open.back().first->end_ns <= s.begin_ns) open.pop_back();
    OpSummary& o = by_name[{s.name, s.category}];
    o.name = s.name, o.category = s.category;
    const double ms = static_cast<double>(s.end_ns - s.begin_ns) / 1e6;
    ++o.calls;
    o.total_ms += ms;
    o.self_ms += ms;
    if (!open.empty()) open.back().second->self_ms -= ms;
    open.emplace_back(&s, &o);
  }
  std::vector<OpSummary> out;
  for (auto& [key, o] : by_name) out.push_back(o);
  std::sort(out.begin(), out.end(), [](const OpSummary& a, const OpSummary& b) { return a.self_ms > b.self_ms; });
  return out;
}

std::string Trace::summary_table(int rows) const {
  const std::vector<OpSummary> all = summary();
  double self_total = 0;
  for (const OpSummary& o : all) self_total += o.self_ms;
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "%-40s %-9s %8s %11s %11s %10s %7s\n", "name", "kind", "calls", "total ms", "self ms", "mean ms", "self %");
  out << line;
  OpSummary rest{"(" + std::to_string(std::max<int64_t>(0, static_cast<int64_t>(all.size()) - rows)) + " more)", "", 0, 0, 0};
  for (size_t i = 0; i < all.size(); ++i) {
    const OpSummary& o = all[i];
    if (static_cast<int>(i) >= rows) {
      rest.calls += o.calls, rest.total_ms += o.total_ms, rest.self_ms += o.self_ms;
      continue;
    }
    std::snprintf(line, sizeof line, "%-40.40s %-9s %8lld %11.3f %11.3f %10.4f %6.1f%%\n", o.name.c_str(), o.category.c_str(),
                  static_cast<long long>(o.calls), o.total_ms, o.self_ms, o.total_ms / static_cast<double>(o.calls),
                  self_total > 0 ? 100.0 * o.self_ms / self_total : 0.0);
    out << line;
  }
  if (rest.calls > 0) {
    std::snprintf(line, sizeof line, "%-40.40s %-9s %8lld %11.3f %11.3f %10s %6.1f%%\n", rest.name.c_str(), "", static_cast<long long>(rest.calls),
                  rest.total_ms, rest.self_ms, "", self_total > 0 ? 100.0 * rest.self_ms / self_total : 0.0);
    out << line;
  }
  std::snprintf(line, sizeof line, "recorded %.3f ms on host threads in %.3f ms of wall time\n", self_total, wall_ms);
  out << line;
  return out.str();
}

}  // namespace tessera::profile
