// Checks a trace written by `tessera train --profile`: valid Chrome trace-event JSON; spans of
// every track properly nested and ordered (a span starting inside another ends inside it); the
// op names and memory counters a CNN step must produce; and the summary's coverage: per
// "train step" span, the time attributed to named spans inside it (its duration less its own
// self time) is at least 90% of the step. Prints "trace ok" and the coverage figures.
//
// Usage: check_trace TRACE.json OP_NAME...
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace {

struct Span {
  std::string name, cat;
  double ts = 0, end = 0;
};

int fail(const std::string& why) {
  std::fprintf(stderr, "check_trace: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: check_trace TRACE.json OP_NAME...");
  std::ifstream in(argv[1]);
  if (!in) return fail(std::string("cannot read ") + argv[1]);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return fail(std::string("not JSON: ") + e.what());
  }
  if (!doc.contains("traceEvents") || !doc["traceEvents"].is_array()) return fail("no traceEvents array");
  std::map<std::pair<int, int>, std::vector<Span>> tracks;
  std::set<std::string> names, counters;
  std::map<std::string, int> thread_names;
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e.at("ph");
    if (ph == "X") {
      Span s{e.at("name"), e.at("cat"), e.at("ts").get<double>(), 0};
      const double dur = e.at("dur").get<double>();
      if (dur < 0) return fail("span " + s.name + " has a negative duration");
      s.end = s.ts + dur;
      if (s.cat == "op" && (!e["args"].contains("inputs") || !e["args"].contains("dtype") || !e["args"].contains("bytes")))
        return fail("op span " + s.name + " lacks its shapes, dtype or bytes");
      names.insert(s.name);
      tracks[{e.at("pid").get<int>(), e.at("tid").get<int>()}].push_back(s);
    } else if (ph == "C") {
      counters.insert(e.at("name").get<std::string>());
      if (!e["args"].contains("value")) return fail("counter without a value");
    } else if (ph == "M" && e.at("name") == "thread_name") {
      ++thread_names[e["args"]["name"]];
    }
  }
  for (int i = 2; i < argc; ++i) {
    if (!names.count(argv[i])) return fail(std::string("no span named ") + argv[i]);
  }
  if (std::none_of(counters.begin(), counters.end(), [](const std::string& c) { return c.rfind("memory ", 0) == 0; }))
    return fail("no memory counter track");
  if (!thread_names.count("main thread")) return fail("no track named 'main thread'");
  if (!counters.count("host resident bytes")) return fail("no host telemetry counter");

  // Nesting: in file order per track (sorted by start, longer first), each span lies inside the
  // innermost open span or starts after it ended. 1 us of slack for the microsecond rounding.
  const double slack = 0.002;
  double step_total = 0, step_self = 0, step_ops = 0;
  int steps = 0;
  for (auto& [key, spans] : tracks) {
    for (size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].ts + slack < spans[i - 1].ts) return fail("spans out of order on track " + std::to_string(key.second));
    }
    std::vector<const Span*> open;
    const Span* step = nullptr;
    for (const Span& s : spans) {
      while (!open.empty() && open.back()->end <= s.ts + slack) {
        if (open.back() == step) step = nullptr;
        open.pop_back();
      }
      if (!open.empty() && s.end > open.back()->end + slack)
        return fail("span " + s.name + " overlaps the end of " + open.back()->name + " without nesting");
      if (s.cat == "step") {
        step = &s;
        ++steps;
        step_total += s.end - s.ts;
        step_self += s.end - s.ts;
      } else if (step && open.back() == step) {
        step_self -= s.end - s.ts;  // a direct child: its time is attributed
      }
      // Time inside kernels and autograd nodes, counted once (outermost such span).
      const bool counted = s.cat == "op" || s.cat == "autograd";
      if (step && counted && std::none_of(open.begin(), open.end(), [](const Span* o) { return o->cat == "op" || o->cat == "autograd"; }))
        step_ops += s.end - s.ts;
      open.push_back(&s);
    }
  }
  if (steps == 0) return fail("no 'train step' spans");
  const double coverage = (step_total - step_self) / step_total;
  std::printf("trace ok: %zu tracks, %d steps, %.1f ms in steps; named spans cover %.1f%%, kernels and autograd nodes %.1f%%\n",
              tracks.size(), steps, step_total / 1000.0, 100.0 * coverage, 100.0 * step_ops / step_total);
  if (coverage < 0.9) return fail("the summary covers only " + std::to_string(100.0 * coverage) + "% of the steps' time");
  return 0;
}
