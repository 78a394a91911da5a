// `tessera bench`: runs the perf/ suites on every backend of this build (see perf/bench.h).
#include <iostream>

#include "../perf/bench.h"
#include "commands.h"
#include "tessera/error.h"

namespace tessera::tools {

void add_bench_command(CLI::App& app) {
  auto opts = std::make_shared<bench::Options>();
  CLI::App* cmd = app.add_subcommand("bench", "Benchmark suites on every backend, with peer libraries and % of peak");
  cmd->add_option("--backend", opts->backends, "backends to run (repeatable; default: every backend with a device, except emulated)");
  cmd->add_option("--suite", opts->suites, "suites to run (repeatable): gemm, elementwise, reduce, conv, memory, train, overhead");
  cmd->add_flag("--quick", opts->quick, "small shapes and 3 repetitions (CI smoke test)");
  cmd->add_option("--json", opts->json_path, "write the records to this JSON file");
  cmd->add_option("--threads", opts->threads, "CPU threads (0: all cores)")->check(CLI::NonNegativeNumber);
  cmd->callback([opts] {
    const auto records = bench::run(*opts);
    if (records.empty()) throw tessera::Error("bench: nothing was measured (no backend with a device selected)");
    if (!opts->json_path.empty()) {
      bench::write_json(records, opts->json_path, *opts);
      std::cout << "# wrote " << records.size() << " records to " << opts->json_path << "\n";
    }
  });
}

}  // namespace tessera::tools
