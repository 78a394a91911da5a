// The `tessera` command. Errors from the library end the program with a one-line message and
// exit code 1; CLI usage errors exit with CLI11's code.
#include <iostream>

#include "commands.h"
#include "tessera/error.h"
#include "tessera_build_config.h"

int main(int argc, char** argv) {
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
