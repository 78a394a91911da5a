#pragma once
// Data-parallel collectives: one process-group API whose implementations live in
// backends/comm/ (MPI today; NCCL and RCCL plug in behind the same interface). Processes are
// launched by mpirun / srun; every rank calls the same collectives in the same order.
//
// Collectives never hang: each has a deadline (collective_timeout(), default 300 s, or
// TESSERA_DIST_TIMEOUT_S). A collective still incomplete at its deadline prints the rank, the
// collective, its sequence number and the tensor's dtype and shape to stderr and aborts the
// job with a non-zero status (on MPI: MPI_Abort, which ends every rank).
//
// Tensors may live on any device: the MPI group stages device tensors through host memory.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::dist {

enum class ReduceOp : uint8_t { sum, mean, max, min };

/** An issued collective. wait() returns once the result is in place (or aborts at the deadline). */
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  /** Non-blocking progress check; true once wait() would return at once. */
  virtual bool test() = 0;
};

/** One transfer of a batched point-to-point call (ProcessGroup::batch_p2p). */
struct P2POp {
  enum class Kind : uint8_t { send, recv };
  Kind kind = Kind::send;
  Tensor tensor;  ///< sent, or received into
  int peer = 0;
  int tag = 0;
};

/**
 * The communicator SPI. Collectives are asynchronous and operate in place on contiguous
 * tensors of the same dtype and shape on every rank (floating or integer dtypes; f16/bf16
 * reduce in f32). A tensor must not be touched until its Work has been waited on.
 */
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /** The rank among the processes on this node (which GPU to use). */
  virtual int local_rank() const = 0;
  virtual std::string backend() const = 0;

  /** t = op over ranks of t. */
  virtual std::unique_ptr<Work> all_reduce(Tensor t, ReduceOp op = ReduceOp::sum) = 0;
  /** t = root's t. */
  virtual std::unique_ptr<Work> broadcast(Tensor t, int root = 0) = 0;
  /** out (world_size x in.numel() elements, rank-major) = every rank's in. */
  virtual std::unique_ptr<Work> all_gather(Tensor out, const Tensor& in) = 0;
  /** out (in.numel() / world_size elements) = this rank's slice of op over ranks of in. */
  virtual std::unique_ptr<Work> reduce_scatter(Tensor out, const Tensor& in, ReduceOp op = ReduceOp::sum) = 0;
  virtual void barrier() = 0;

  /**
   * Point-to-point (a pipeline's activations and their gradients): send `t` to rank `dst`,
   * matched by a recv on `dst` with the same `tag`, in issue order per (peer, tag). The receiving
   * tensor has the sent dtype and element count. Under the same deadline as the collectives: a
   * peer that never sends or receives is reported with rank, peer, tag, dtype and shape.
   * MPI_Isend/MPI_Irecv; ncclSend/ncclRecv on the NCCL and RCCL groups. Groups without
   * point-to-point throw NotImplemented.
   */
  virtual std::unique_ptr<Work> send(const Tensor& t, int dst, int tag = 0);
  virtual std::unique_ptr<Work> recv(Tensor t, int src, int tag = 0);
  /**
   * The sends and receives of one pipeline step issued together; one Work per op, in order. On
   * NCCL and RCCL one group call (ncclGroupStart/End): a send issued alone holds its stream until
   * the peer receives, so two stages that each send to the other before receiving would wait for
   * ever; batched, the transfers proceed together. Here (MPI, whose transfers never block the
   * caller): each op issued in turn.
   */
  virtual std::vector<std::unique_ptr<Work>> batch_p2p(const std::vector<P2POp>& ops);

  /**
   * The ranks of this group that pass the same `color` form a new group, ordered by `key` (then
   * by rank here): the tensor-parallel and pipeline groups inside one mpirun (MPI_Comm_split). A
   * collective over this group: every rank calls it, in the same order. Groups without subgroups
   * throw NotImplemented.
   */
  virtual std::shared_ptr<ProcessGroup> split(int color, int key);
};

/** The process-group backends this build has and can load ("mpi" when MPI was found and its
 *  module, with the MPI library, loads). */
std::vector<std::string> available_backends();
/** Why `backend` is not available ("" when it is): not built, or its module's loader message. */
std::string unavailable_reason(const std::string& backend);

/**
 * Creates the default group on `backend` ("" picks the first available) the first time;
 * later calls return it. Throws naming the missing backend when the build has none.
 */
std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend = "");
bool is_initialized();
/** The default group; throws if init_process_group() has not run. */
ProcessGroup& default_group();

/** Deadline of every collective (TESSERA_DIST_TIMEOUT_S overrides the 300 s default). */
void set_collective_timeout(std::chrono::milliseconds timeout);
std::chrono::milliseconds collective_timeout();

/** The mean of `value` over the ranks of `group` (a collective; the same result on every rank). */
double mean_over_ranks(ProcessGroup& group, double value);
/** True on every rank when `flag` is true on any rank of `group` (a collective). */
bool any_rank(ProcessGroup& group, bool flag);

/** Synchronous conveniences on the default group. */
void all_reduce(Tensor t, ReduceOp op = ReduceOp::sum);
void broadcast(Tensor t, int root = 0);

namespace detail {
/** "all_reduce #12 of float32 [64, 10]": how the watchdog names a collective. */
std::string describe_collective(const char* name, uint64_t sequence, const Tensor& t);
/** The watchdog's report (rank, collective, deadline) on stderr; the caller then aborts. */
void report_timeout(int rank, int world, const std::string& collective, std::chrono::milliseconds deadline);
using GroupFactory = std::function<std::shared_ptr<ProcessGroup>()>;
/** A new group on `backend` (not the default group): NCCL and RCCL bootstrap through "mpi". */
std::shared_ptr<ProcessGroup> create_process_group(const std::string& backend);
}  // namespace detail

}  // namespace tessera::dist
