// The MPI process group: nonblocking MPI collectives (MPI_Iallreduce and friends) polled with
// MPI_Test against the collective deadline, so a missing peer ends in the watchdog's report
// and MPI_Abort, never in a hang. Device tensors, non-contiguous ones and f16/bf16 (reduced in
// f32) go through a host staging copy that is written back when the collective completes.
#include <mpi.h>

#include <unistd.h>

#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "tessera/dist.h"
#include "tessera/runtime.h"
#include "tessera/autograd.h"
#include "tessera/error.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"

namespace tessera::dist {
namespace {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(tessera::detail::concat("dist (mpi): ", what, " failed: ", std::string(text, static_cast<size_t>(len))));
}

MPI_Datatype mpi_type(DType dt, const char* op) {
  switch (dt) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    default: throw Error(tessera::detail::concat(op, ": dtype ", dt, " is not supported by the mpi process group"));
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

// The host buffer a collective runs on: the tensor itself when it is a contiguous CPU tensor
// MPI can reduce, else a copy (f16/bf16 as f32) written back by finish(). Device tensors are
// staged through pooled page-locked buffers of their backend (empty_pinned).
struct Staged {
  Tensor target, host;
  bool copied = false;
  void finish() const {
    if (copied) Tensor(target).copy_(host);
  }
};
Staged stage(const Tensor& t, bool read) {
  const bool half = t.dtype() == DType::f16 || t.dtype() == DType::bf16;
  if (t.device() == kCPU && t.is_contiguous() && !half) return {t, t, false};
  const DType host_dtype = half ? DType::f32 : t.dtype();
  Tensor host = t.device() == kCPU ? empty(t.shape(), host_dtype, kCPU) : empty_pinned(t.shape(), host_dtype, t.device());
  if (read) host.copy_(t);
  return {t, host, true};
}

int count_of(const Tensor& t, const char* op) {
  TESSERA_CHECK(t.numel() <= INT_MAX, op, "tensors above 2^31 - 1 elements are not supported by the mpi group, got ", t.numel());
  return static_cast<int>(t.numel());
}

class MpiGroup;

class MpiWork final : public Work {
 public:
  MpiWork(const MpiGroup& group, std::string what, MPI_Request request, std::function<void()> finish)
      : group_(group), what_(std::move(what)), request_(request), finish_(std::move(finish)), start_(std::chrono::steady_clock::now()) {}
  ~MpiWork() override {
    // A collective cannot be cancelled: an unwaited Work is completed here.
    if (!done_) wait();
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    check_mpi(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    if (flag) {
      done_ = true;
      if (finish_) finish_();
    }
    return done_;
  }
  void wait() override;

 private:
  const MpiGroup& group_;
  std::string what_;
  MPI_Request request_;
  std::function<void()> finish_;
  std::chrono::steady_clock::time_point start_;
  bool done_ = false;
};

class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup() {
    int initialized = 0;
    check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
    if (!initialized) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    describe_ranks();
  }
  // A subgroup of split(): owns `comm`.
  MpiGroup(MPI_Comm comm, int color) : comm_(comm), owned_(true) {
    describe_ranks();
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    scope_ = tessera::detail::concat("subgroup ", color, " (world rank ", world_rank, "): ");
  }
  ~MpiGroup() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Comm_free(&comm_);
  }
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;

  std::shared_ptr<ProcessGroup> split(int color, int key) override {
    TESSERA_CHECK(color >= 0, "split", "color must be non-negative, got ", color);
    MPI_Comm sub = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    return std::make_shared<MpiGroup>(sub, color);
  }

  void describe_ranks() {
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &world_), "MPI_Comm_size");
    MPI_Comm node;
    check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    check_mpi(MPI_Comm_rank(node, &local_rank_), "MPI_Comm_rank");
    MPI_Comm_free(&node);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "mpi"; }

  std::unique_ptr<Work> all_reduce(Tensor t, ReduceOp op) override {
    TESSERA_CHECK(t.defined(), "all_reduce", "undefined tensor");
    TESSERA_CHECK(op != ReduceOp::mean || is_floating(t.dtype()), "all_reduce", "mean needs a floating dtype, got ", t.dtype());
    const Staged s = stage(t, true);
    const int n = count_of(s.host, "all_reduce");
    MPI_Request req;
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, s.host.data_ptr(), n, mpi_type(s.host.dtype(), "all_reduce"), mpi_op(op), comm_, &req), "MPI_Iallreduce");
    const double world = world_;
    return issue("all_reduce", t, req, [s, op, world] {
      if (op == ReduceOp::mean) {
        NoGradGuard no_grad;
        Tensor(s.host).copy_(div(s.host, world));
      }
      s.finish();
    });
  }

  std::unique_ptr<Work> broadcast(Tensor t, int root) override {
    TESSERA_CHECK(t.defined(), "broadcast", "undefined tensor");
    TESSERA_CHECK(root >= 0 && root < world_, "broadcast", "root ", root, " out of range for world size ", world_);
    const Staged s = stage(t, true);
    MPI_Request req;
    check_mpi(MPI_Ibcast(s.host.data_ptr(), count_of(s.host, "broadcast"), mpi_type(s.host.dtype(), "broadcast"), root, comm_, &req), "MPI_Ibcast");
    return issue("broadcast", t, req, [s] { s.finish(); });
  }

  std::unique_ptr<Work> all_gather(Tensor out, const Tensor& in) override {
    TESSERA_CHECK(out.defined() && in.defined(), "all_gather", "undefined tensor");
    TESSERA_CHECK(out.numel() == in.numel() * world_, "all_gather", "output has ", out.numel(), " elements, expected ", world_, " x ",
                  in.numel());
    TESSERA_CHECK(out.dtype() == in.dtype(), "all_gather", "dtypes differ: output ", out.dtype(), ", input ", in.dtype());
    const Staged src = stage(in, true), dst = stage(out, false);
    const MPI_Datatype type = mpi_type(src.host.dtype(), "all_gather");
    MPI_Request req;
    check_mpi(MPI_Iallgather(src.host.data_ptr(), count_of(src.host, "all_gather"), type, dst.host.data_ptr(), count_of(src.host, "all_gather"),
                             type, comm_, &req),
              "MPI_Iallgather");
    return issue("all_gather", in, req, [src, dst] { dst.finish(); });
  }

  std::unique_ptr<Work> reduce_scatter(Tensor out, const Tensor& in, ReduceOp op) override {
    TESSERA_CHECK(out.defined() && in.defined(), "reduce_scatter", "undefined tensor");
    TESSERA_CHECK(in.numel() == out.numel() * world_, "reduce_scatter", "input has ", in.numel(), " elements, expected ", world_, " x ",
                  out.numel());
    TESSERA_CHECK(out.dtype() == in.dtype(), "reduce_scatter", "dtypes differ: output ", out.dtype(), ", input ", in.dtype());
    TESSERA_CHECK(op != ReduceOp::mean || is_floating(in.dtype()), "reduce_scatter", "mean needs a floating dtype, got ", in.dtype());
    const Staged src = stage(in, true), dst = stage(out, false);
    MPI_Request req;
    check_mpi(MPI_Ireduce_scatter_block(src.host.data_ptr(), dst.host.data_ptr(), count_of(dst.host, "reduce_scatter"),
                                        mpi_type(src.host.dtype(), "reduce_scatter"), mpi_op(op), comm_, &req),
              "MPI_Ireduce_scatter_block");
    const double world = world_;
    return issue("reduce_scatter", in, req, [src, dst, op, world] {
      if (op == ReduceOp::mean) {
        NoGradGuard no_grad;
        Tensor(dst.host).copy_(div(dst.host, world));
      }
      dst.finish();
    });
  }

  std::unique_ptr<Work> send(const Tensor& t, int dst, int tag) override {
    auto work = issue_send(t, dst, tag);
    if (stream_order_) work->wait();
    return work;
  }

  std::unique_ptr<Work> recv(Tensor t, int src, int tag) override {
    auto work = issue_recv(std::move(t), src, tag);
    if (stream_order_) work->wait();
    return work;
  }

  std::vector<std::unique_ptr<Work>> batch_p2p(const std::vector<P2POp>& ops) override {
    std::vector<std::unique_ptr<Work>> works;
    for (const P2POp& op : ops)
      works.push_back(op.kind == P2POp::Kind::send ? issue_send(op.tensor, op.peer, op.tag) : issue_recv(op.tensor, op.peer, op.tag));
    if (stream_order_) {
      for (auto& w : works) w->wait();
    }
    return works;
  }

  void barrier() override {
    MPI_Request req;
    check_mpi(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier");
    MpiWork(*this, tessera::detail::concat(scope_, "barrier #", ++sequence_), req, nullptr).wait();
  }

 private:
  std::unique_ptr<Work> issue_send(const Tensor& t, int dst, int tag) {
    check_peer(t, dst, tag, "send");
    const Staged s = stage(t, true);
    MPI_Request req;
    const int n = count_of(s.host, "send");
    const MPI_Datatype type = mpi_type(s.host.dtype(), "send");
    if (stream_order_) check_mpi(MPI_Issend(s.host.data_ptr(), n, type, dst, tag, comm_, &req), "MPI_Issend");
    else check_mpi(MPI_Isend(s.host.data_ptr(), n, type, dst, tag, comm_, &req), "MPI_Isend");
    return issue(tessera::detail::concat("send to rank ", dst, " (tag ", tag, ")").c_str(), t, req, [s] {});
  }

  std::unique_ptr<Work> issue_recv(Tensor t, int src, int tag) {
    check_peer(t, src, tag, "recv");
    const Staged d = stage(t, false);
    MPI_Request req;
    check_mpi(MPI_Irecv(d.host.data_ptr(), count_of(d.host, "recv"), mpi_type(d.host.dtype(), "recv"), src, tag, comm_, &req), "MPI_Irecv");
    return issue(tessera::detail::concat("recv from rank ", src, " (tag ", tag, ")").c_str(), t, req, [d] { d.finish(); });
  }

  std::unique_ptr<Work> issue(const char* name, const Tensor& t, MPI_Request req, std::function<void()> finish) {
    return std::make_unique<MpiWork>(*this, scope_ + detail::describe_collective(name, ++sequence_, t), req, std::move(finish));
  }

  void check_peer(const Tensor& t, int peer, int tag, const char* op) const {
    TESSERA_CHECK(t.defined(), op, "undefined tensor");
    TESSERA_CHECK(peer >= 0 && peer < world_ && peer != rank_, op, "peer rank ", peer, " must be another rank of the ", world_,
                  " (this is rank ", rank_, ")");
    TESSERA_CHECK(tag >= 0 && tag <= 32767, op, "tag ", tag, " outside 0..32767 (the least MPI_TAG_UB MPI guarantees)");
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;  // a subgroup frees its communicator
  // TESSERA_P2P_STREAM_ORDER=1 (tests): point-to-point as on one NCCL stream. A send completes
  // only once its peer receives (MPI_Issend), and each send, recv or batch_p2p completes before
  // the call returns, so an order of transfers that would deadlock NCCL deadlocks here too, and
  // the watchdog names the transfer. Batches complete together, as NCCL's group calls do.
  bool stream_order_ = [] {
    const char* v = std::getenv("TESSERA_P2P_STREAM_ORDER");
    return v && *v && std::string(v) != "0";
  }();
  std::string scope_;   // "subgroup <color> (world rank r): " in the watchdog's reports
  int rank_ = 0, world_ = 1, local_rank_ = 0;
  uint64_t sequence_ = 0;
};

// What this rank is waiting in, for the SIGTERM report below: when a peer dies, mpirun
// terminates the survivors (SIGTERM, then SIGKILL) before their deadlines; the handler says
// which collective each one was stuck in. A fixed buffer and write(2): async-signal-safe.
char g_waiting_in[256];
volatile std::sig_atomic_t g_waiting = 0;
void (*g_previous_sigterm)(int) = SIG_DFL;  // restored and re-raised: an application's handler still runs

extern "C" void report_termination(int sig) {
  if (g_waiting) {
    static const char prefix[] = "tessera dist watchdog: ";
    static const char suffix[] = " was interrupted: the job is being terminated (a peer exited or was killed)\n";
    [[maybe_unused]] ssize_t w = ::write(2, prefix, sizeof prefix - 1);
    w = ::write(2, g_waiting_in, std::strlen(g_waiting_in));
    w = ::write(2, suffix, sizeof suffix - 1);
  }
  std::signal(sig, g_previous_sigterm == SIG_ERR ? SIG_DFL : g_previous_sigterm);
  std::raise(sig);
}

void MpiWork::wait() {
  static const bool installed = [] {
    g_previous_sigterm = std::signal(SIGTERM, report_termination);
    return true;
  }();
  (void)installed;
  std::snprintf(g_waiting_in, sizeof g_waiting_in, "rank %d of %d: %s", group_.rank(), group_.world_size(), what_.c_str());
  g_waiting = 1;
  struct Clear {
    ~Clear() { g_waiting = 0; }
  } clear;
  const auto deadline = start_ + collective_timeout();
  for (int spins = 0; !test(); ++spins) {
    if (std::chrono::steady_clock::now() > deadline) {
      detail::report_timeout(group_.rank(), group_.world_size(), what_, collective_timeout());
      MPI_Abort(MPI_COMM_WORLD, 3);
      std::_Exit(3);
    }
    // MPI progresses a collective only inside MPI calls, so keep testing: sleeping between tests
    // stalled large all-reduces (pipelined in many fragments) at 0.3 GB/s. Yield now and then,
    // and back off to 1 ms sleeps only after a second of waiting (a peer that is far behind).
    if (spins % 64 == 63) std::this_thread::yield();
    if (std::chrono::steady_clock::now() - start_ > std::chrono::seconds(1)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

std::shared_ptr<ProcessGroup> make_mpi_process_group() { return std::make_shared<MpiGroup>(); }

}  // namespace tessera::dist
