#pragma once
// The trace profiler: while a profile is recording, every op (one span per kernel launch, with
// its shapes, dtype, backend, bytes and FLOPs), every autograd node, every allocator event (as
// a memory counter per device) and every user scope (profile::Scope, the trainer's steps) is
// recorded on the calling thread's track. On device backends each kernel is also bracketed by
// two events on the current stream, which become a span on that stream's own track with device
// time. The result is written in the Chrome trace-event format (Perfetto, chrome://tracing)
// and summarised per op.
//
// Cost when not recording: one relaxed atomic load per op and per allocation.
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::profile {

/** One span: [begin_ns, end_ns) on a track, nested by time within its track. */
struct Span {
  std::string name;
  std::string category;  ///< "op", "autograd", "scope", "step", "device"
  int64_t begin_ns = 0, end_ns = 0;  ///< since the profile started
  int track = 0;
  std::string args_json;  ///< a JSON object's members ("\"shapes\": ..."), or empty
};

/** A sample of a counter track (device memory in use, telemetry). */
struct CounterSample {
  std::string name;  ///< e.g. "memory cpu:0"
  int64_t t_ns = 0;
  double value = 0;
};

struct Track {
  int id = 0;
  std::string name;  ///< "thread 1 (main)", "cuda:0 stream 0x..."
};

/** Per-name totals of a trace. Self time excludes the spans nested inside. */
struct OpSummary {
  std::string name, category;
  int64_t calls = 0;
  double total_ms = 0, self_ms = 0;
};

class Trace {
 public:
  std::vector<Span> spans;              ///< sorted by (track, begin, longer first)
  std::vector<CounterSample> counters;  ///< sorted by time
  std::vector<Track> tracks;
  double wall_ms = 0;  ///< from start() to stop()

  /** The Chrome trace-event JSON ({"traceEvents": [...]}); throws naming the path on I/O errors. */
  void write_chrome_json(const std::string& path) const;
  std::string chrome_json() const;
  /** Host-thread spans per name (device spans apart), most self time first. */
  std::vector<OpSummary> summary() const;
  /** summary() as an aligned text table, the top `rows` names and the rest as one line. */
  std::string summary_table(int rows = 25) const;
};

/** Starts recording (what an earlier profile recorded is dropped). Throws if one is recording. */
void start();
/** Stops recording: device work is waited for and its events resolved. Throws if none is. */
Trace stop();
/** Whether a profile is recording. */
bool recording();
/** Whether scopes are being tracked (recording, or the CPU cross-check naming where an op
 *  diverged): callers that build a scope's name only then can test this first. */
bool scopes_active();
/** The calling thread's open scope names, outermost first, joined by " > " ("" outside any). */
std::string scope_path();

/**
 * A named range on the calling thread's track while it lives (and an NVTX / roctx range on
 * the GPU backends when their libraries are found). Cheap when not recording.
 */
class Scope {
 public:
  explicit Scope(const char* name, const char* category = "scope");
  explicit Scope(std::string name, const char* category = "scope");
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void begin(std::string name, const char* category);
  bool active_ = false;    // on the thread's scope stack
  bool recorded_ = false;  // a span is written at the end
  std::string name_;
  const char* category_ = nullptr;
  int64_t begin_ns_ = 0;
};

}  // namespace tessera::profile
