// `tessera bench`: runs the perf/ suites on every backend of this build (see perf/bench.h).
#include <algorithm>
#include <iostream>

#include "../perf/bench.h"
#include "commands.h"
#include "tessera/error.h"
#include "tessera/nn/file_io.h"

namespace tessera::tools {

void add_bench_command(CLI::App& app) {
  auto opts = std::make_shared<bench::Options>();
  CLI::App* cmd = app.add_subcommand("bench", "Benchmark suites on every backend, with peer libraries and % of peak");
  cmd->add_option("--backend", opts->backends, "backends to run (repeatable; default: every backend with a device, except emulated)");
  cmd->add_option("--suite", opts->suites,
                  "suites to run (repeatable): gemm, elementwise, reduce, conv, memory, train, fused, overhead; or gpu-model alone "
                  "(per-kernel memory counters and roofline times from the emulated backend); or allreduce alone, under mpirun "
                  "(all-reduce bus bandwidth over the process group, 1 KiB-64 MiB); or pipeline alone, under mpirun (GPipe vs 1F1B step "
                  "time and bubble, one stage per rank); or dist alone, under mpirun (both, and a GPT step fully sharded beside DDP: "
                  "time and peak memory per rank)");
  cmd->add_flag("--quick", opts->quick, "small shapes and 3 repetitions (CI smoke test)");
  cmd->add_option("--filter", opts->filters,
                  "run only cases whose name/dtype/shape (e.g. matmul/bf16/1024x1024x1024) contains this text (repeatable)");
  cmd->add_option("--json", opts->json_path, "write the records to this JSON file");
  cmd->add_option("--threads", opts->threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 4096));
  cmd->callback([opts] {
    if (!opts->json_path.empty()) nn::check_output_path(opts->json_path, "bench", "--json");  // before, not after, the run
    if (std::find(opts->suites.begin(), opts->suites.end(), "allreduce") != opts->suites.end()) {
      if (opts->suites.size() != 1) throw tessera::Error("bench: the allreduce suite runs alone (--suite allreduce)");
      bench::run_allreduce(opts->quick, opts->json_path, *opts);
      return;
    }
    if (std::find(opts->suites.begin(), opts->suites.end(), "dist") != opts->suites.end()) {
      if (opts->suites.size() != 1) throw tessera::Error("bench: the dist suite runs alone (--suite dist)");
      bench::run_dist(opts->quick, opts->json_path, *opts);
      return;
    }
    if (std::find(opts->suites.begin(), opts->suites.end(), "pipeline") != opts->suites.end()) {
      if (opts->suites.size() != 1) throw tessera::Error("bench: the pipeline suite runs alone (--suite pipeline)");
      bench::run_pipeline(opts->quick, opts->json_path, *opts);
      return;
    }
    if (std::find(opts->suites.begin(), opts->suites.end(), "gpu-model") != opts->suites.end()) {
      if (opts->suites.size() != 1) throw tessera::Error("bench: the gpu-model suite runs alone (--suite gpu-model)");
      for (const std::string& b : opts->backends) {
        if (b.rfind("emulated", 0) != 0) throw tessera::Error("bench: the gpu-model suite runs on the emulated backend, not '" + b + "'");
      }
      bench::run_gpu_model(opts->quick, opts->json_path);
      return;
    }
    const auto records = bench::run(*opts);
    if (records.empty()) throw tessera::Error("bench: nothing was measured (no backend with a device selected)");
    if (!opts->json_path.empty()) {
      bench::write_json(records, opts->json_path, *opts);
      std::cout << "# wrote " << records.size() << " records to " << opts->json_path << "\n";
    }
  });
}

}  // namespace tessera::tools
