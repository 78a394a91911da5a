#pragma once
// `tessera bench`: the same workloads on every backend in the build, each timed with warm-up
// and repeated device-synchronised runs (median, min, max), normalised by the hardware's peak
// and compared with peer libraries measured in the same process, interleaved with the engine
// (engine, peer, engine, peer, ...) so ratios survive a noisy machine.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tessera/device.h"

namespace tessera::bench {

struct Options {
  std::vector<std::string> backends;  ///< empty: every backend with a device
  std::vector<std::string> suites;    ///< empty: all
  bool quick = false;                 ///< CI smoke: small shapes, few repetitions
  int threads = 0;                    ///< CPU threads (0: library default)
  std::string json_path;              ///< write the records here as a JSON array
  std::vector<std::string> filters;   ///< keep cases whose "name/dtype/shape" contains any of these (empty: all)
};

/** A timed body: one call runs the workload once (the harness synchronises the device). */
using Body = std::function<void()>;

struct Peer {
  std::string name;  ///< "openblas", "stream_triad", "libtorch"
  Body run;
  double work = 0;   ///< the peer's own FLOPs or bytes when they differ from the case's (0: same work)
  /** > 0: the peer ran out of process and timed itself (a script's median per call): the
   *  harness records this instead of calling `run`. */
  double external_median_s = 0;
  /** Idle seconds after each block of peer calls, before the engine's next block: a pool that
   *  busy-waits after a call (OpenBLAS's workers spin for ~2^28 cycles, ~0.1 s) would take a
   *  core from the engine's block and halve its speed on a 2-core machine. */
  double settle_s = 0;
};

struct Case {
  std::string suite, name, dtype;
  std::vector<int64_t> shape;
  double flops = 0;  ///< work per call, for GFLOP/s (0: not a FLOP workload)
  double bytes = 0;  ///< memory traffic per call, for GB/s (0: not a bandwidth workload)
  int calls = 1;     ///< calls of the op per run (tiny-op overhead cases loop); times are per call
  Body run;
  std::optional<Peer> peer;
  /** Also record the allocator's peak bytes of one call of the engine and of the peer (a peer
   *  that runs on the engine's device, such as the unfused composition). */
  bool peak_memory = false;
  /** The correctness gate (checks.h): runs the op once against a reference; an error message
   *  makes the case "wrong" and untimed. Unset: "unchecked" (whole training steps, in-place
   *  updates). */
  std::function<std::optional<std::string>()> check = nullptr;
};

struct Record {
  std::string suite, name, backend, device, dtype;
  std::vector<int64_t> shape;
  double median_s = 0, min_s = 0, max_s = 0;
  double gflops = 0, gbps = 0, pct_of_peak = -1;  // -1: no known peak
  std::string peer;
  double peer_median_s = 0, ratio = 0;  // ratio = peer time / engine time (> 1: Tessera faster)
  int64_t peak_bytes = -1, peer_peak_bytes = -1;  // -1: not measured (Case::peak_memory)
  std::string status = "unchecked";  ///< "ok", "wrong" (not timed) or "unchecked" (no reference)
  std::string wrong;                 ///< why, when wrong
};

/** Peak FLOP/s and bandwidth of a device; 0 when unknown. */
struct Peak {
  std::string source;  ///< how it was obtained ("measured clock x ...", "table: H100 SXM")
  double f32_gflops = 0, f16_gflops = 0, gbps = 0;
};
Peak cpu_peak(int threads);
/** The CPU backend's kernel set ("avx512", "avx2+fma", ...), or "" without a CPU backend. */
std::string cpu_kernel_set();
/** A property of the CPU device's `tessera info` ("cpu family", "bf16 GEMM"); "" without one. */
std::string cpu_property(const std::string& name);
Peak device_peak(Device device);

/** The workloads of `suite` on `device` (cases may carry a peer when the device is the CPU). */
std::vector<Case> make_cases(const std::string& suite, Device device, bool quick, int threads);
/** Every suite name, in run order. */
const std::vector<std::string>& suite_names();

/** Runs everything selected; prints a table to stdout; returns the records. */
std::vector<Record> run(const Options& options);
/**
 * The gpu-model suite (perf/gpu_model.cpp): each case once on the emulated backend with its
 * access counters on; prints per kernel launches, blocks, sectors per request, coalescing, bytes,
 * FLOPs, host syncs and an H100 / MI250X roofline time; writes JSON to `json_path` if given.
 */
void run_gpu_model(bool quick, const std::string& json_path);
/**
 * The allreduce suite (perf/dist_suite.cpp), run under mpirun: in-place f32 all-reduce of
 * 1 KiB-64 MiB over the default process group, algorithm and bus bandwidth as nccl-tests
 * defines them; rank 0 prints and writes the JSON.
 */
void run_allreduce(bool quick, const std::string& json_path, const Options& options);
/**
 * The pipeline suite (perf/dist_suite.cpp), run under mpirun: one pipeline stage per rank
 * (4 x Linear + Tanh on the CPU), GPipe vs 1F1B step time at 8 micro-batches, the schedule's
 * bubble and rank 0's measured wait share; rank 0 prints and writes the JSON.
 */
void run_pipeline(bool quick, const std::string& json_path, const Options& options);
/** Under mpirun: all-reduce bandwidth, the pipeline schedules, and a GPT step under ZeRO-3 beside DDP. */
void run_dist(bool quick, const std::string& json_path, const Options& options);

/** Writes `text` to `path` through a temp file and a rename, so a reader never sees half a file. */
void write_file_atomically(const std::string& text, const std::string& path);
/** Writes records as a JSON array (atomically: temp file then rename). */
void write_json(const std::vector<Record>& records, const std::string& path, const Options& options);

}  // namespace tessera::bench
