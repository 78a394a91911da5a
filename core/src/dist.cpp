// The process-group front end: the default group, the collective deadline and the watchdog's
// report. The transports are in backends/comm/: modules loaded on first use (TESSERA_MODULES), or
// linked in (the static build); TESSERA_HAS_MPI/NCCL/RCCL say which this build has.
#include "tessera/dist.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "tessera/backend/modules.h"
#include "tessera/error.h"
#include "tessera/ops/creation.h"
#include "tessera_build_config.h"

namespace tessera::dist {

#if !TESSERA_MODULES_ENABLED
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

namespace {
// The groups this build has, in preference order ("" picks the first available: mpi, which
// runs without a GPU).
std::vector<std::string> built_groups() {
  std::vector<std::string> names;
#if defined(TESSERA_HAS_MPI)
  names.push_back("mpi");
#endif
#if defined(TESSERA_HAS_NCCL)
  names.push_back("nccl");
#endif
#if defined(TESSERA_HAS_RCCL)
  names.push_back("rccl");
#endif
  return names;
}
}  // namespace

std::vector<std::string> available_backends() {
  std::vector<std::string> names;
  for (const auto& n : built_groups()) {
    if (!modules::enabled() || modules::load(n)) names.push_back(n);
  }
  return names;
}

std::string unavailable_reason(const std::string& backend) {
  for (const auto& n : built_groups()) {
    if (n != backend) continue;
    std::string why;
    if (!modules::enabled() || modules::load(n, &why)) return "";
    return "module " + modules::file_name(n) + ": " + why;
  }
  if (backend == "mpi") return TESSERA_MPI_MISSING_REASON;
  if (backend == "nccl") return TESSERA_NCCL_MISSING_REASON;
  if (backend == "rccl") return TESSERA_RCCL_MISSING_REASON;
  return "unknown process-group backend '" + backend + "' (mpi, nccl, rccl)";
}

namespace detail {
std::shared_ptr<ProcessGroup> create_process_group(const std::string& backend) {
#if TESSERA_MODULES_ENABLED
  using Factory = void (*)(std::shared_ptr<ProcessGroup>*);
  std::string why;
  auto factory = reinterpret_cast<Factory>(modules::symbol(backend, "tessera_module_process_group", &why));
  if (!factory) throw Error(tessera::detail::concat("init_process_group: backend '", backend, "' is unavailable (", unavailable_reason(backend), ")"));
  std::shared_ptr<ProcessGroup> group;
  factory(&group);
  return group;
#else
#if defined(TESSERA_HAS_MPI)
  if (backend == "mpi") return make_mpi_process_group();
#endif
#if defined(TESSERA_HAS_NCCL)
  if (backend == "nccl") return make_nccl_process_group();
#endif
#if defined(TESSERA_HAS_RCCL)
  if (backend == "rccl") return make_rccl_process_group();
#endif
  throw Error(tessera::detail::concat("init_process_group: backend '", backend, "' is unavailable (", unavailable_reason(backend), ")"));
#endif
}
}  // namespace detail

std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend) {
  std::lock_guard lock(g_mutex);
  if (g_default) {
    TESSERA_CHECK(backend.empty() || backend == g_default->backend(), "init_process_group", "already initialised with backend ",
                  g_default->backend(), ", asked for ", backend);
    return g_default;
  }
  const std::vector<std::string> built = built_groups();
  TESSERA_CHECK(!built.empty(), "init_process_group",
                "this build has no process-group backend (MPI was not found at configure time: apt install libopenmpi-dev)");
  std::string choice = backend;
  if (choice.empty()) {  // the first that loads (only here are the others' modules tried)
    const std::vector<std::string> names = available_backends();
    TESSERA_CHECK(!names.empty(), "init_process_group", "no process-group backend can be loaded (", unavailable_reason(built.front()), ")");
    choice = names.front();
  }
  bool known = false;
  for (const auto& n : built) known = known || n == choice;
  if (!known) {
    std::string have;
    for (const auto& n : built) have += (have.empty() ? "" : ", ") + n;
    throw Error(tessera::detail::concat("init_process_group: unknown or unavailable backend '", choice, "' (this build has: ", have, ")"));
  }
  g_default = detail::create_process_group(choice);
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

std::unique_ptr<Work> ProcessGroup::send(const Tensor& t, int dst, int tag) {
  (void)t, (void)dst, (void)tag;
  throw NotImplemented(tessera::detail::concat("send: the ", backend(), " process group has no point-to-point transfers"));
}
std::unique_ptr<Work> ProcessGroup::recv(Tensor t, int src, int tag) {
  (void)t, (void)src, (void)tag;
  throw NotImplemented(tessera::detail::concat("recv: the ", backend(), " process group has no point-to-point transfers"));
}
std::vector<std::unique_ptr<Work>> ProcessGroup::batch_p2p(const std::vector<P2POp>& ops) {
  std::vector<std::unique_ptr<Work>> works;
  for (const P2POp& op : ops)
    works.push_back(op.kind == P2POp::Kind::send ? send(op.tensor, op.peer, op.tag) : recv(op.tensor, op.peer, op.tag));
  return works;
}
std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key) {
  (void)color, (void)key;
  throw NotImplemented(tessera::detail::concat("split: the ", backend(), " process group has no subgroups"));
}

double mean_over_ranks(ProcessGroup& group, double value) {
  Tensor t = full({1}, value, DType::f64, kCPU);
  group.all_reduce(t, ReduceOp::mean)->wait();
  return t.item<double>();
}

bool any_rank(ProcessGroup& group, bool flag) {
  Tensor t = full({1}, flag ? 1.0 : 0.0, DType::i32, kCPU);
  group.all_reduce(t, ReduceOp::max)->wait();
  return t.item<int32_t>() != 0;
}

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
