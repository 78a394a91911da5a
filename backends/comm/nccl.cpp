// The NCCL process group (CUDA): collectives on device memory, queued on the calling thread's
// current stream (so they follow the kernels that produced the tensor), bootstrapped through the
// MPI group (rank 0's ncclUniqueId is broadcast over MPI). Each rank drives one GPU, its local
// rank modulo the node's device count. Tensors not on that GPU go through the MPI group.
//
// Waiting polls a CUDA event against the collective deadline; past it the watchdog reports and
// ncclCommAbort()s the communicator (which releases the stuck kernel) before ending the process,
// so a lost peer never leaves a rank spinning in an NCCL kernel forever.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "tessera/dist.h"
#include "tessera/error.h"
#include "tessera/ops/creation.h"

namespace tessera {
namespace gpu::cuda {
cudaStream_t current_vendor_stream();  // backends/gpu/device_backend.cu
}
namespace dist {
std::shared_ptr<ProcessGroup> make_mpi_process_group();  // mpi.cpp

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(tessera::detail::concat("dist (nccl): ", what, " failed: ", cudaGetErrorString(e)));
}
void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(tessera::detail::concat("dist (nccl): ", what, " failed: ", ncclGetErrorString(r)));
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
    default: throw Error(tessera::detail::concat(op, ": dtype ", dt, " is not supported by the nccl process group"));
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

class NcclWork final : public Work {
 public:
  NcclWork(ncclComm_t comm, int rank, int world, std::string what, cudaStream_t stream, std::vector<Tensor> keep)
      : comm_(comm), rank_(rank), world_(world), what_(std::move(what)), keep_(std::move(keep)), start_(std::chrono::steady_clock::now()) {
    check_cuda(cudaEventCreateWithFlags(&done_event_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(done_event_, stream), "cudaEventRecord");
  }
  ~NcclWork() override {
    if (!done_) wait();
    cudaEventDestroy(done_event_);
  }
  bool test() override {
    if (done_) return true;
    const cudaError_t e = cudaEventQuery(done_event_);
    if (e == cudaErrorNotReady) return false;
    check_cuda(e, "cudaEventQuery");
    ncclResult_t async = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
    check_nccl(async, what_.c_str());
    done_ = true;
    keep_.clear();
    return true;
  }
  void wait() override {
    const auto deadline = start_ + collective_timeout();
    while (!test()) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) check_nccl(async, what_.c_str());
      if (std::chrono::steady_clock::now() > deadline) {
        detail::report_timeout(rank_, world_, what_, collective_timeout());
        ncclCommAbort(comm_);
        std::_Exit(3);
      }
      std::this_thread::yield();
    }
  }

 private:
  ncclComm_t comm_;
  int rank_, world_;
  std::string what_;
  std::vector<Tensor> keep_;  // the buffers stay alive until the collective is done
  cudaEvent_t done_event_ = nullptr;
  std::chrono::steady_clock::time_point start_;
  bool done_ = false;
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup() : mpi_(make_mpi_process_group()) {
    int devices = 0;
    check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    TESSERA_CHECK(devices > 0, "init_process_group", "nccl: no CUDA device on this node");
    device_ = mpi_->local_rank() % devices;
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    ncclUniqueId id;
    if (mpi_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    Tensor bytes = empty({static_cast<int64_t>(sizeof id)}, DType::u8, kCPU);
    std::memcpy(bytes.data_ptr(), &id, sizeof id);
    mpi_->broadcast(bytes, 0)->wait();
    std::memcpy(&id, bytes.data_ptr(), sizeof id);
    check_nccl(ncclCommInitRank(&comm_, mpi_->world_size(), id, mpi_->rank()), "ncclCommInitRank");
  }
  ~NcclGroup() override {
    if (comm_) ncclCommDestroy(comm_);
  }
  int rank() const override { return mpi_->rank(); }
  int world_size() const override { return mpi_->world_size(); }
  int local_rank() const override { return mpi_->local_rank(); }
  std::string backend() const override { return "nccl"; }

  std::unique_ptr<Work> all_reduce(Tensor t, ReduceOp op) override {
    if (!mine(t)) return mpi_->all_reduce(std::move(t), op);
    const Tensor c = contiguous_target(t, "all_reduce");
    const cudaStream_t s = gpu::cuda::current_vendor_stream();
    check_nccl(ncclAllReduce(c.data_ptr(), c.data_ptr(), static_cast<size_t>(c.numel()), nccl_type(c.dtype(), "all_reduce"), nccl_op(op), comm_, s),
               "ncclAllReduce");
    return issue("all_reduce", t, s, {c});
  }
  std::unique_ptr<Work> broadcast(Tensor t, int root) override {
    if (!mine(t)) return mpi_->broadcast(std::move(t), root);
    TESSERA_CHECK(root >= 0 && root < world_size(), "broadcast", "root ", root, " out of range for world size ", world_size());
    const Tensor c = contiguous_target(t, "broadcast");
    const cudaStream_t s = gpu::cuda::current_vendor_stream();
    check_nccl(ncclBroadcast(c.data_ptr(), c.data_ptr(), static_cast<size_t>(c.numel()), nccl_type(c.dtype(), "broadcast"), root, comm_, s),
               "ncclBroadcast");
    return issue("broadcast", t, s, {c});
  }
  std::unique_ptr<Work> all_gather(Tensor out, const Tensor& in) override {
    if (!mine(out) || !mine(in)) return mpi_->all_gather(std::move(out), in);
    TESSERA_CHECK(out.numel() == in.numel() * world_size() && out.dtype() == in.dtype(), "all_gather", "output ", shape_str(out.shape()), " ",
                  out.dtype(), " does not hold ", world_size(), " x input ", shape_str(in.shape()), " ", in.dtype());
    const Tensor src = in.contiguous(), dst = contiguous_target(out, "all_gather");
    const cudaStream_t s = gpu::cuda::current_vendor_stream();
    check_nccl(ncclAllGather(src.data_ptr(), dst.data_ptr(), static_cast<size_t>(src.numel()), nccl_type(src.dtype(), "all_gather"), comm_, s),
               "ncclAllGather");
    return issue("all_gather", in, s, {src, dst});
  }
  std::unique_ptr<Work> reduce_scatter(Tensor out, const Tensor& in, ReduceOp op) override {
    if (!mine(out) || !mine(in)) return mpi_->reduce_scatter(std::move(out), in, op);
    TESSERA_CHECK(in.numel() == out.numel() * world_size() && out.dtype() == in.dtype(), "reduce_scatter", "input ", shape_str(in.shape()),
                  " ", in.dtype(), " is not ", world_size(), " x output ", shape_str(out.shape()), " ", out.dtype());
    const Tensor src = in.contiguous(), dst = contiguous_target(out, "reduce_scatter");
    const cudaStream_t s = gpu::cuda::current_vendor_stream();
    check_nccl(ncclReduceScatter(src.data_ptr(), dst.data_ptr(), static_cast<size_t>(dst.numel()), nccl_type(src.dtype(), "reduce_scatter"),
                                 nccl_op(op), comm_, s),
               "ncclReduceScatter");
    return issue("reduce_scatter", in, s, {src, dst});
  }
  void barrier() override { mpi_->barrier(); }

 private:
  bool mine(const Tensor& t) const { return t.defined() && t.device().type == DeviceType::cuda && t.device().index == device_; }
  // NCCL writes in place: the tensor must be contiguous (a view cannot be written back later
  // without a host-visible completion point).
  static Tensor contiguous_target(const Tensor& t, const char* op) {
    TESSERA_CHECK(t.is_contiguous(), op, "the nccl group needs contiguous tensors, got a view of shape ", shape_str(t.shape()));
    return t;
  }
  std::unique_ptr<Work> issue(const char* name, const Tensor& t, cudaStream_t s, std::vector<Tensor> keep) {
    return std::make_unique<NcclWork>(comm_, rank(), world_size(), detail::describe_collective(name, ++sequence_, t), s, std::move(keep));
  }

  std::shared_ptr<ProcessGroup> mpi_;
  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  uint64_t sequence_ = 0;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_process_group() { return std::make_shared<NcclGroup>(); }

}  // namespace dist
}  // namespace tessera
