// The NCCL process group (CUDA) and, from the same source, the RCCL one (HIP: RCCL is NCCL's
// API under rccl.h; compiled by hipcc with TESSERA_DIST_RCCL). Collectives on device memory,
// on the group's stream after the calling thread's current stream's queued work (so they
// follow the kernels that produced the tensor and overlap the ones queued after), bootstrapped through the MPI group (rank 0's ncclUniqueId is broadcast over MPI).
// Each rank drives one GPU, its local rank modulo the node's device count. Tensors not on that
// GPU go through the MPI group.
//
// Waiting polls an event against the collective deadline (collective_wait.h); past it the
// watchdog reports and ncclCommAbort()s the communicator (which releases the stuck kernel) before
// ending the process, so a lost peer never leaves a rank spinning in a collective kernel forever.
// The same holds for everything else that would wait on the collective's stream: the device
// backend's device-wide syncs (synchronize, the allocator's out-of-memory retry, cudaFree) first
// wait for this rank's outstanding collectives with their deadlines; ncclCommInitRank runs under
// the deadline too; an asynchronous NCCL error aborts the communicator before it is reported (a
// later ncclCommDestroy would block on it), and destroying a Work never throws.
#if defined(TESSERA_DIST_RCCL)
#include <hip/hip_runtime.h>
#if __has_include(<rccl/rccl.h>)
#include <rccl/rccl.h>
#else
#include <rccl.h>  // older ROCm installed the header at the top level
#endif
#define TESSERA_XCCL_GPU hip
#define TESSERA_XCCL_NAME "rccl"
#define TESSERA_XCCL_DEVICE DeviceType::hip
#define TESSERA_XCCL_FACTORY make_rccl_process_group
#define xcclRt(name) hip##name
using xcclStream_t = hipStream_t;
using xcclEvent_t = hipEvent_t;
using xcclError_t = hipError_t;
#else
#include <cuda_runtime.h>
#include <nccl.h>
#define TESSERA_XCCL_GPU cuda
#define TESSERA_XCCL_NAME "nccl"
#define TESSERA_XCCL_DEVICE DeviceType::cuda
#define TESSERA_XCCL_FACTORY make_nccl_process_group
#define xcclRt(name) cuda##name
using xcclStream_t = cudaStream_t;
using xcclEvent_t = cudaEvent_t;
using xcclError_t = cudaError_t;
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "collective_wait.h"

#include "tessera/dist.h"
#include "tessera/error.h"
#include "tessera/ops/creation.h"

namespace tessera {
namespace gpu::TESSERA_XCCL_GPU {
xcclStream_t current_vendor_stream();  // backends/gpu/device_backend.cu
void add_device_sync_hook(void (*hook)(int device));
}
namespace dist {

namespace {

void check_rt(xcclError_t e, const char* what) {
  if (e != xcclRt(Success)) throw Error(tessera::detail::concat("dist (" TESSERA_XCCL_NAME "): ", what, " failed: ", xcclRt(GetErrorString)(e)));
}
void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(tessera::detail::concat("dist (" TESSERA_XCCL_NAME "): ", what, " failed: ", ncclGetErrorString(r)));
}

ncclDataType_t nccl_type(DType dt, const char* op) {
  switch (dt) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    default: throw Error(tessera::detail::concat(op, ": dtype ", dt, " is not supported by the " TESSERA_XCCL_NAME " process group"));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::mean: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

// ncclInProgress (non-blocking communicators) exists from NCCL 2.14; older NCCL and RCCL
// releases have no such state.
constexpr bool in_progress(ncclResult_t r) {
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21400
  return r == ncclInProgress;
#else
  (void)r;
  return false;
#endif
}

// One communicator and the collectives of it that the host has not yet seen finish.
struct CommState {
  ncclComm_t comm = nullptr;
  int device = 0, rank = 0, world = 0;
  std::atomic<bool> aborted{false};
  struct Outstanding {
    xcclEvent_t event;
    std::chrono::steady_clock::time_point deadline;
    std::string what;
  };
  std::mutex mutex;
  std::vector<std::shared_ptr<Outstanding>> outstanding;

  void abort() {
    if (!aborted.exchange(true)) (void)ncclCommAbort(comm);
  }
  bool comm_failed() {
    if (aborted) return true;
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return true;
    return async != ncclSuccess && !in_progress(async);
  }
  std::string async_error_text() {
    ncclResult_t async = ncclSuccess;
    (void)ncclCommGetAsyncError(comm, &async);
    return aborted && async == ncclSuccess ? "the communicator was aborted" : ncclGetErrorString(async);
  }
  // Waits for one collective; a failure aborts the communicator and throws, a timeout ends the process.
  void wait_for(const Outstanding& o) {
    const auto query = [&] {
      const xcclError_t e = xcclRt(EventQuery)(o.event);
      if (e == xcclRt(Success)) return detail::EventPoll::reached;
      (void)xcclRt(GetLastError)();  // NotReady is latched on some runtimes
      return e == xcclRt(ErrorNotReady) ? detail::EventPoll::not_ready : detail::EventPoll::failed;
    };
    switch (detail::wait_collective(query, [&] { return comm_failed(); }, o.deadline)) {
      case detail::WaitOutcome::done: return;
      case detail::WaitOutcome::failed: {
        const std::string why = async_error_text();
        abort();
        throw Error(tessera::detail::concat("dist (" TESSERA_XCCL_NAME "): ", o.what, " failed: ", why,
                                            " (the communicator was aborted; create a new process group)"));
      }
      case detail::WaitOutcome::timed_out:
        detail::report_timeout(rank, world, o.what, collective_timeout());
        abort();
        std::_Exit(3);
    }
  }
  // Before anything waits on the whole device: every outstanding collective, under its deadline.
  void drain() {
    std::vector<std::shared_ptr<Outstanding>> pending;
    {
      std::lock_guard lock(mutex);
      pending = outstanding;
    }
    for (const auto& o : pending) wait_for(*o);
  }
};

// The live communicators of this process, for the device-sync hook.
struct LiveComms {
  std::mutex mutex;
  std::vector<std::weak_ptr<CommState>> comms;
};
LiveComms& live_comms() {
  static auto* l = new LiveComms;
  return *l;
}
void before_device_sync(int device) {
  std::vector<std::shared_ptr<CommState>> states;
  {
    std::lock_guard lock(live_comms().mutex);
    for (const auto& w : live_comms().comms) {
      if (auto s = w.lock(); s && s->device == device && !s->aborted) states.push_back(std::move(s));
    }
  }
  for (const auto& s : states) s->drain();
}

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<CommState> state, std::string what, xcclStream_t stream, std::vector<Tensor> keep)
      : state_(std::move(state)), keep_(std::move(keep)) {
    xcclEvent_t event = nullptr;
    check_rt(xcclRt(EventCreateWithFlags)(&event, xcclRt(EventDisableTiming)), "event create");
    const xcclError_t e = xcclRt(EventRecord)(event, stream);
    if (e != xcclRt(Success)) (void)xcclRt(EventDestroy)(event);
    check_rt(e, "event record");
    entry_ = std::make_shared<CommState::Outstanding>(CommState::Outstanding{event, std::chrono::steady_clock::now() + collective_timeout(), std::move(what)});
    std::lock_guard lock(state_->mutex);
    state_->outstanding.push_back(entry_);
  }
  // Never throws: an unwaited failed collective has already aborted its communicator (or does now).
  ~NcclWork() override {
    try {
      if (!done_) wait();
    } catch (...) {
      state_->abort();
    }
    forget();
  }
  bool test() override {
    if (done_) return true;
    const xcclError_t e = xcclRt(EventQuery)(entry_->event);
    if (e == xcclRt(ErrorNotReady)) {
      (void)xcclRt(GetLastError)();
      if (state_->comm_failed()) wait();  // throws, after aborting
      return false;
    }
    wait();  // reached (or failed): wait_for sees it at once
    return true;
  }
  void wait() override {
    if (done_) return;
    state_->wait_for(*entry_);
    done_ = true;
    keep_.clear();
    forget();
  }

 private:
  void forget() {
    if (!entry_) return;
    {
      std::lock_guard lock(state_->mutex);
      auto& v = state_->outstanding;
      v.erase(std::remove(v.begin(), v.end(), entry_), v.end());
    }
    (void)xcclRt(EventDestroy)(entry_->event);
    entry_.reset();
  }

  std::shared_ptr<CommState> state_;
  std::shared_ptr<CommState::Outstanding> entry_;
  std::vector<Tensor> keep_;  // the buffers stay alive until the collective is done
  bool done_ = false;
};

// ncclCommInitRank blocks until every rank joined: run it on a helper thread and wait under the
// collective deadline (a rank that never arrives ends this one with the watchdog's report).
ncclComm_t init_comm_with_deadline(int device, int world, const ncclUniqueId& id, int rank) {
  struct Shared {
    std::mutex mutex;
    std::condition_variable cv;
    bool finished = false;
    ncclResult_t result = ncclSuccess;
    ncclComm_t comm = nullptr;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared, device, world, id, rank] {
    (void)xcclRt(SetDevice)(device);  // the current device is per thread
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRank(&comm, world, id, rank);
    std::lock_guard lock(shared->mutex);
    shared->finished = true, shared->result = r, shared->comm = comm;
    shared->cv.notify_all();
  }).detach();
  std::unique_lock lock(shared->mutex);
  if (!shared->cv.wait_for(lock, collective_timeout(), [&] { return shared->finished; })) {
    detail::report_timeout(rank, world, "ncclCommInitRank", collective_timeout());
    std::_Exit(3);
  }
  check_nccl(shared->result, "ncclCommInitRank");
  return shared->comm;
}

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup() : NcclGroup(detail::create_process_group("mpi")) {}
  // Over the ranks of `mpi` (the world, or a subgroup of it): its rank 0 makes the unique id.
  explicit NcclGroup(std::shared_ptr<ProcessGroup> mpi) : mpi_(std::move(mpi)) {
    int devices = 0;
    check_rt(xcclRt(GetDeviceCount)(&devices), "device count");
    TESSERA_CHECK(devices > 0, "init_process_group", TESSERA_XCCL_NAME ": no GPU on this node");
    device_ = mpi_->local_rank() % devices;
    check_rt(xcclRt(SetDevice)(device_), "set device");
    ncclUniqueId id;
    if (mpi_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    Tensor bytes = empty({static_cast<int64_t>(sizeof id)}, DType::u8, kCPU);
    std::memcpy(bytes.data_ptr(), &id, sizeof id);
    mpi_->broadcast(bytes, 0)->wait();
    std::memcpy(&id, bytes.data_ptr(), sizeof id);
    state_ = std::make_shared<CommState>();
    state_->device = device_, state_->rank = mpi_->rank(), state_->world = mpi_->world_size();
    state_->comm = init_comm_with_deadline(device_, mpi_->world_size(), id, mpi_->rank());
    comm_ = state_->comm;
    check_rt(xcclRt(StreamCreateWithFlags)(&comm_stream_, xcclRt(StreamNonBlocking)), "stream create");
    static const bool hooked = [] {
      gpu::TESSERA_XCCL_GPU::add_device_sync_hook(&before_device_sync);
      return true;
    }();
    (void)hooked;
    std::lock_guard lock(live_comms().mutex);
    live_comms().comms.push_back(state_);
  }
  ~NcclGroup() override {
    try {
      state_->drain();  // ncclCommDestroy would block on a collective that never finishes
    } catch (...) {
      // failed: drain aborted the communicator
    }
    if (state_->aborted) {
      // ncclCommAbort already released it.
    } else if (comm_) {
      (void)ncclCommDestroy(comm_);
    }
    if (comm_stream_) (void)xcclRt(StreamDestroy)(comm_stream_);
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  // A new communicator over the MPI subgroup (ncclCommInitRank, which RCCL has too, rather than
  // the newer ncclCommSplit).
  std::shared_ptr<ProcessGroup> split(int color, int key) override { return std::make_shared<NcclGroup>(mpi_->split(color, key)); }
  int rank() const override { return mpi_->rank(); }
  int world_size() const override { return mpi_->world_size(); }
  int local_rank() const override { return mpi_->local_rank(); }
  std::string backend() const override { return TESSERA_XCCL_NAME; }

  std::unique_ptr<Work> all_reduce(Tensor t, ReduceOp op) override {
    if (!mine(t)) return mpi_->all_reduce(std::move(t), op);
    const Tensor c = contiguous_target(t, "all_reduce");
    const xcclStream_t s = comm_stream();
    check_nccl(ncclAllReduce(c.data_ptr(), c.data_ptr(), static_cast<size_t>(c.numel()), nccl_type(c.dtype(), "all_reduce"), nccl_op(op), comm_, s),
               "ncclAllReduce");
    return issue("all_reduce", t, s, {c});
  }
  std::unique_ptr<Work> broadcast(Tensor t, int root) override {
    if (!mine(t)) return mpi_->broadcast(std::move(t), root);
    TESSERA_CHECK(root >= 0 && root < world_size(), "broadcast", "root ", root, " out of range for world size ", world_size());
    const Tensor c = contiguous_target(t, "broadcast");
    const xcclStream_t s = comm_stream();
    check_nccl(ncclBroadcast(c.data_ptr(), c.data_ptr(), static_cast<size_t>(c.numel()), nccl_type(c.dtype(), "broadcast"), root, comm_, s),
               "ncclBroadcast");
    return issue("broadcast", t, s, {c});
  }
  std::unique_ptr<Work> all_gather(Tensor out, const Tensor& in) override {
    if (!mine(out) || !mine(in)) return mpi_->all_gather(std::move(out), in);
    TESSERA_CHECK(out.numel() == in.numel() * world_size() && out.dtype() == in.dtype(), "all_gather", "output ", shape_str(out.shape()), " ",
                  out.dtype(), " does not hold ", world_size(), " x input ", shape_str(in.shape()), " ", in.dtype());
    const Tensor src = in.contiguous(), dst = contiguous_target(out, "all_gather");
    const xcclStream_t s = comm_stream();
    check_nccl(ncclAllGather(src.data_ptr(), dst.data_ptr(), static_cast<size_t>(src.numel()), nccl_type(src.dtype(), "all_gather"), comm_, s),
               "ncclAllGather");
    return issue("all_gather", in, s, {src, dst});
  }
  std::unique_ptr<Work> reduce_scatter(Tensor out, const Tensor& in, ReduceOp op) override {
    if (!mine(out) || !mine(in)) return mpi_->reduce_scatter(std::move(out), in, op);
    TESSERA_CHECK(in.numel() == out.numel() * world_size() && out.dtype() == in.dtype(), "reduce_scatter", "input ", shape_str(in.shape()),
                  " ", in.dtype(), " is not ", world_size(), " x output ", shape_str(out.shape()), " ", out.dtype());
    const Tensor src = in.contiguous(), dst = contiguous_target(out, "reduce_scatter");
    const xcclStream_t s = comm_stream();
    check_nccl(ncclReduceScatter(src.data_ptr(), dst.data_ptr(), static_cast<size_t>(dst.numel()), nccl_type(src.dtype(), "reduce_scatter"),
                                 nccl_op(op), comm_, s),
               "ncclReduceScatter");
    return issue("reduce_scatter", in, s, {src, dst});
  }
  std::unique_ptr<Work> send(const Tensor& t, int dst, int tag) override {
    if (!mine(t)) return mpi_->send(t, dst, tag);
    TESSERA_CHECK(dst >= 0 && dst < world_size() && dst != rank(), "send", "peer rank ", dst, " must be another rank of the ",
                  world_size());
    // NCCL has no tags: transfers between two ranks match in issue order, which is the order
    // the SPI promises per (peer, tag) when every tag is issued in one order on both sides.
    const Tensor src = t.contiguous();
    const xcclStream_t s = comm_stream();
    check_nccl(ncclSend(src.data_ptr(), static_cast<size_t>(src.numel()), nccl_type(src.dtype(), "send"), dst, comm_, s), "ncclSend");
    return issue(tessera::detail::concat("send to rank ", dst, " (tag ", tag, ")").c_str(), t, s, {src});
  }
  std::unique_ptr<Work> recv(Tensor t, int src, int tag) override {
    if (!mine(t)) return mpi_->recv(std::move(t), src, tag);
    TESSERA_CHECK(src >= 0 && src < world_size() && src != rank(), "recv", "peer rank ", src, " must be another rank of the ",
                  world_size());
    const Tensor dst = contiguous_target(t, "recv");
    const xcclStream_t s = comm_stream();
    check_nccl(ncclRecv(dst.data_ptr(), static_cast<size_t>(dst.numel()), nccl_type(dst.dtype(), "recv"), src, comm_, s), "ncclRecv");
    return issue(tessera::detail::concat("recv from rank ", src, " (tag ", tag, ")").c_str(), t, s, {dst});
  }
  std::vector<std::unique_ptr<Work>> batch_p2p(const std::vector<P2POp>& ops) override {
    // Host tensors through MPI (never blocking); this GPU's in one group call, checked first so
    // that no error leaves the group open.
    std::vector<std::unique_ptr<Work>> works(ops.size());
    std::vector<Tensor> buffers(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2POp& op = ops[i];
      const bool send = op.kind == P2POp::Kind::send;
      if (!mine(op.tensor)) {
        works[i] = send ? mpi_->send(op.tensor, op.peer, op.tag) : mpi_->recv(op.tensor, op.peer, op.tag);
        continue;
      }
      TESSERA_CHECK(op.peer >= 0 && op.peer < world_size() && op.peer != rank(), send ? "send" : "recv", "peer rank ", op.peer,
                    " must be another rank of the ", world_size());
      buffers[i] = send ? op.tensor.contiguous() : contiguous_target(op.tensor, "recv");
      (void)nccl_type(buffers[i].dtype(), send ? "send" : "recv");
    }
    const xcclStream_t s = comm_stream();
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    ncclResult_t result = ncclSuccess;
    for (size_t i = 0; i < ops.size() && result == ncclSuccess; ++i) {
      if (!buffers[i].defined()) continue;
      const Tensor& b = buffers[i];
      const auto count = static_cast<size_t>(b.numel());
      const ncclDataType_t type = nccl_type(b.dtype(), "batch_p2p");
      result = ops[i].kind == P2POp::Kind::send ? ncclSend(b.data_ptr(), count, type, ops[i].peer, comm_, s)
                                                : ncclRecv(b.data_ptr(), count, type, ops[i].peer, comm_, s);
    }
    const ncclResult_t ended = ncclGroupEnd();
    check_nccl(result, "ncclSend/ncclRecv in a group");
    check_nccl(ended, "ncclGroupEnd");
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!buffers[i].defined()) continue;
      const bool send = ops[i].kind == P2POp::Kind::send;
      const std::string what = send ? tessera::detail::concat("send to rank ", ops[i].peer, " (tag ", ops[i].tag, ", batched)")
                                    : tessera::detail::concat("recv from rank ", ops[i].peer, " (tag ", ops[i].tag, ", batched)");
      works[i] = issue(what.c_str(), ops[i].tensor, s, {buffers[i]});
    }
    return works;
  }
  void barrier() override { mpi_->barrier(); }

 private:
  bool mine(const Tensor& t) const { return t.defined() && t.device().type == TESSERA_XCCL_DEVICE && t.device().index == device_; }
  // NCCL writes in place: the tensor must be contiguous (a view cannot be written back later
  // without a host-visible completion point).
  static Tensor contiguous_target(const Tensor& t, const char* op) {
    TESSERA_CHECK(t.is_contiguous(), op, "the " TESSERA_XCCL_NAME " group needs contiguous tensors, got a view of shape ", shape_str(t.shape()));
    return t;
  }
  // Collectives run on the group's own stream, after the work the caller's current stream has
  // queued so far (an event between them): backward keeps queuing kernels while a bucket's
  // all-reduce runs, which is DDP's overlap. The buffers stay referenced by the Work until the
  // host has seen the collective finish, so the caching allocator cannot hand them to the
  // compute stream while the collective still reads or writes them.
  xcclStream_t comm_stream() {
    TESSERA_CHECK(!state_->aborted, TESSERA_XCCL_NAME, "the communicator was aborted after a failed or timed-out collective; create a new process group");
    xcclEvent_t ready = nullptr;
    check_rt(xcclRt(EventCreateWithFlags)(&ready, xcclRt(EventDisableTiming)), "event create");
    check_rt(xcclRt(EventRecord)(ready, gpu::TESSERA_XCCL_GPU::current_vendor_stream()), "event record");
    check_rt(xcclRt(StreamWaitEvent)(comm_stream_, ready, 0), "stream wait");
    (void)xcclRt(EventDestroy)(ready);  // released once the recorded work is done
    return comm_stream_;
  }
  std::unique_ptr<Work> issue(const char* name, const Tensor& t, xcclStream_t s, std::vector<Tensor> keep) {
    return std::make_unique<NcclWork>(state_, detail::describe_collective(name, ++sequence_, t), s, std::move(keep));
  }

  std::shared_ptr<ProcessGroup> mpi_;
  std::shared_ptr<CommState> state_;
  ncclComm_t comm_ = nullptr;
  xcclStream_t comm_stream_ = nullptr;
  int device_ = 0;
  uint64_t sequence_ = 0;
};

}  // namespace

std::shared_ptr<ProcessGroup> TESSERA_XCCL_FACTORY() { return std::make_shared<NcclGroup>(); }

}  // namespace dist
}  // namespace tessera
