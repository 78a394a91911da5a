// The `tessera` command. Errors from the library end the program with a one-line message and
// exit code 1; CLI usage errors exit with CLI11's code.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "commands.h"
#include "tessera/error.h"
#include "tessera_build_config.h"

namespace {
// `tessera bench` times Tessera's TBB threads interleaved with the peers' thread pools. oneDNN's
// OpenMP workers spin after each call by default and steal the cores Tessera is then timed on
// (its bf16 GEMM measured 0.56x oneDNN that way, 0.9x with passive workers). libgomp reads
// OMP_WAIT_POLICY once, when it is loaded, so the command re-executes itself with it set.
void passive_openmp_for_bench(int argc, char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  bool bench = false;
  for (int i = 1; i < argc; ++i) bench = bench || std::strcmp(argv[i], "bench") == 0;
  if (!bench) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}
}  // namespace

int main(int argc, char** argv) {
  passive_openmp_for_bench(argc, argv);
  CLI::App app{"tessera — portable tensor engine (CPU/oneTBB, CUDA, HIP, Kokkos)"};
  app.set_version_flag("--version", std::string("tessera ") + TESSERA_VERSION_STRING);
  app.require_subcommand(1);
  tessera::tools::add_info_command(app);
  tessera::tools::add_demo_command(app);
  tessera::tools::add_train_command(app);
  tessera::tools::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tessera::Error& e) {
    std::cerr << "tessera: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tessera: unexpected error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
