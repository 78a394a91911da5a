// The `tessera` command. Errors from the library end the program with a one-line message and
// exit code 1; CLI usage errors exit with CLI11's code.
#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "../perf/peer_info.h"
#include "commands.h"
#include "tessera/error.h"
#include "tessera_build_config.h"

namespace {
// `tessera bench` times Tessera's TBB threads interleaved with the peers' thread pools. oneDNN's
// OpenMP workers spin after each call by default and steal the cores Tessera is then timed on
// (its bf16 GEMM measured 0.56x oneDNN that way, 0.9x with passive workers). libgomp reads
// OMP_WAIT_POLICY once, when it is loaded, so the command re-executes itself with it set.
// OpenBLAS, likewise, picks its kernel once, when it loads, and Debian's 0.3.21 falls back to
// an SSE3 kernel on CPUs it does not know (perf/peer_info.cpp): the bench sets
// OPENBLAS_CORETYPE to the best core for this CPU unless the user chose one.
//
// Peers allocate through malloc, and glibc hands blocks above its mmap threshold back to the
// kernel on free: every call of a peer then faults its output in again, page by page. On a
// virtual machine a fault costs tens of microseconds (libtorch's conv2d forward measured 45 ms
// that way, 3.6 ms without), so the peer's time was its page faults. Tessera's caching allocator
// keeps its blocks; the bench lets glibc keep the peers' too (no mmap'd blocks, no trimming), as
// a long-running process with a caching malloc (jemalloc, tcmalloc) would.
void prepare_bench_environment(int argc, char** argv) {
  bool bench = false;
  for (int i = 1; i < argc; ++i) bench = bench || std::strcmp(argv[i], "bench") == 0;
  if (!bench) return;
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);  // -1: never (the argument is an int; glibc reads it as size_t)
#endif
  bool changed = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    changed = true;
  }
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && !tessera::bench::peers::best_openblas_core().empty()) {
    setenv("OPENBLAS_CORETYPE", tessera::bench::peers::best_openblas_core().c_str(), 1);
    changed = true;
  }
  // Standing in for an AVX2-only CPU (TESSERA_CPU_ISA=avx2): oneDNN (libtorch's convolutions,
  // the bf16 GEMM peer) is held to AVX2 too; OpenBLAS gets its AVX2 core above.
  if (tessera::bench::peers::held_to_avx2() && std::getenv("ONEDNN_MAX_CPU_ISA") == nullptr) {
    setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
    changed = true;
  }
  if (changed) execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}
}  // namespace

int main(int argc, char** argv) {
  prepare_bench_environment(argc, argv);
  CLI::App app{"tessera — portable tensor engine (CPU/oneTBB, CUDA, HIP, Kokkos)"};
  app.set_version_flag("--version", std::string("tessera ") + TESSERA_VERSION_STRING);
  app.require_subcommand(1);
  tessera::tools::add_info_command(app);
  tessera::tools::add_demo_command(app);
  tessera::tools::add_train_command(app);
  tessera::tools::add_generate_command(app);
  tessera::tools::add_bench_command(app);
  tessera::tools::add_onnx_command(app);
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
