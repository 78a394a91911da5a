#pragma once
// Waiting for a collective (NCCL/RCCL) without ever blocking past its deadline: the host polls
// the completion event and the communicator's asynchronous error instead of calling a blocking
// synchronise (a lost peer leaves the collective kernel spinning, and cudaDeviceSynchronize,
// cudaFree or ncclCommDestroy would then wait forever). Host-only and vendor-free, so the
// decision is unit-tested (tests/core/collective_wait_test.cpp); backends/comm/nccl.cpp gives it
// the vendor calls and acts on the outcome (abort the communicator, report, end the process).
#include <chrono>
#include <thread>

namespace tessera::dist::detail {

enum class EventPoll { reached, not_ready, failed };
enum class WaitOutcome { done, failed, timed_out };

/**
 * Polls until the event is reached (then done, unless the communicator reports an error), the
 * communicator reports an error (failed: the caller must abort it before anything else waits on
 * its stream), or `deadline` passes (timed_out). `query()` returns an EventPoll; `comm_failed()`
 * returns true for an asynchronous error other than "in progress".
 */
template <class Query, class CommFailed>
WaitOutcome wait_collective(Query&& query, CommFailed&& comm_failed, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const EventPoll p = query();
    if (p == EventPoll::failed) return WaitOutcome::failed;
    if (p == EventPoll::reached) return comm_failed() ? WaitOutcome::failed : WaitOutcome::done;
    if (comm_failed()) return WaitOutcome::failed;
    if (std::chrono::steady_clock::now() > deadline) return WaitOutcome::timed_out;
    std::this_thread::yield();
  }
}

}  // namespace tessera::dist::detail
