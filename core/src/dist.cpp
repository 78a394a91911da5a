// The process-group front end: the default group, the collective deadline and the watchdog's
// report. Backends are compiled in (backends/comm/); TESSERA_HAS_MPI says whether MPI is.
#include "tessera/dist.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "tessera/error.h"

namespace tessera::dist {

#if defined(TESSERA_HAS_MPI)
// backends/comm/mpi.cpp
std::shared_ptr<ProcessGroup> make_mpi_process_group();
#endif
#if defined(TESSERA_HAS_NCCL)
// backends/comm/nccl.cpp (CUDA device tensors; others through MPI)
std::shared_ptr<ProcessGroup> make_nccl_process_group();
#endif
#if defined(TESSERA_HAS_RCCL)
// backends/comm/nccl.cpp compiled by hipcc (HIP device tensors; others through MPI)
std::shared_ptr<ProcessGroup> make_rccl_process_group();
#endif

namespace {
std::mutex g_mutex;
std::shared_ptr<ProcessGroup> g_default;

std::chrono::milliseconds& timeout_ref() {
  static std::chrono::milliseconds t = [] {
    if (const char* e = std::getenv("TESSERA_DIST_TIMEOUT_S")) {
      const double s = std::atof(e);
      if (s > 0) return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
    }
    return std::chrono::milliseconds(300'000);
  }();
  return t;
}
}  // namespace

std::vector<std::string> available_backends() {
  std::vector<std::string> names;
#if defined(TESSERA_HAS_MPI)
  names.push_back("mpi");
#endif
#if defined(TESSERA_HAS_NCCL)
  names.push_back("nccl");  // after mpi: "" picks mpi, which runs without a GPU
#endif
#if defined(TESSERA_HAS_RCCL)
  names.push_back("rccl");
#endif
  return names;
}

std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend) {
  std::lock_guard lock(g_mutex);
  if (g_default) {
    TESSERA_CHECK(backend.empty() || backend == g_default->backend(), "init_process_group", "already initialised with backend ",
                  g_default->backend(), ", asked for ", backend);
    return g_default;
  }
  const std::vector<std::string> names = available_backends();
  TESSERA_CHECK(!names.empty(), "init_process_group",
                "this build has no process-group backend (MPI was not found at configure time: apt install libopenmpi-dev)");
  const std::string choice = backend.empty() ? names.front() : backend;
#if defined(TESSERA_HAS_MPI)
  if (choice == "mpi") g_default = make_mpi_process_group();
#endif
#if defined(TESSERA_HAS_NCCL)
  if (choice == "nccl") g_default = make_nccl_process_group();
#endif
#if defined(TESSERA_HAS_RCCL)
  if (choice == "rccl") g_default = make_rccl_process_group();
#endif
  if (!g_default) {
    std::string have;
    for (const auto& n : names) have += (have.empty() ? "" : ", ") + n;
    throw Error(tessera::detail::concat("init_process_group: unknown or unavailable backend '", choice, "' (this build has: ", have, ")"));
  }
  return g_default;
}

bool is_initialized() {
  std::lock_guard lock(g_mutex);
  return g_default != nullptr;
}

ProcessGroup& default_group() {
  std::lock_guard lock(g_mutex);
  TESSERA_CHECK(g_default != nullptr, "dist", "no process group: call dist::init_process_group() first");
  return *g_default;
}

void set_collective_timeout(std::chrono::milliseconds timeout) {
  TESSERA_CHECK(timeout.count() > 0, "set_collective_timeout", "the deadline must be positive, got ", timeout.count(), " ms");
  timeout_ref() = timeout;
}
std::chrono::milliseconds collective_timeout() { return timeout_ref(); }

void all_reduce(Tensor t, ReduceOp op) { default_group().all_reduce(std::move(t), op)->wait(); }
void broadcast(Tensor t, int root) { default_group().broadcast(std::move(t), root)->wait(); }

namespace detail {
std::string describe_collective(const char* name, uint64_t sequence, const Tensor& t) {
  return tessera::detail::concat(name, " #", sequence, " of ", t.dtype(), " ", shape_str(t.shape()));
}

void report_timeout(int rank, int world, const std::string& collective, std::chrono::milliseconds deadline) {
  std::fprintf(stderr,
               "tessera dist watchdog: rank %d of %d: %s did not complete within %.1f s; a peer has not joined it "
               "(it crashed, hangs, or issued a different collective). Aborting the job.\n",
               rank, world, collective.c_str(), static_cast<double>(deadline.count()) / 1000.0);
  std::fflush(stderr);
}
}  // namespace detail

}  // namespace tessera::dist
