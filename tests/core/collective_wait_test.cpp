// Waiting for a collective never blocks past its deadline, and an asynchronous communicator
// error is a failure to abort on (backends/comm/collective_wait.h).
#include <doctest/doctest.h>

#include "comm/collective_wait.h"

using namespace tessera::dist::detail;

TEST_CASE("a collective wait ends at its deadline, on an asynchronous error, or when its event is reached") {
  const auto past = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  const auto far = std::chrono::steady_clock::now() + std::chrono::hours(1);
  int polls = 0;
  const auto ready_after_3 = [&] { return ++polls >= 3 ? EventPoll::reached : EventPoll::not_ready; };
  const auto healthy = [] { return false; };
  CHECK(wait_collective(ready_after_3, healthy, far) == WaitOutcome::done);
  CHECK(polls == 3);
  // A peer that never arrives: the event is never reached and the deadline ends the wait.
  CHECK(wait_collective([] { return EventPoll::not_ready; }, healthy, past) == WaitOutcome::timed_out);
  // An asynchronous NCCL error while the kernel still spins: failed at once, not at the deadline.
  int comm_checks = 0;
  CHECK(wait_collective([] { return EventPoll::not_ready; }, [&] { return ++comm_checks >= 2; }, far) == WaitOutcome::failed);
  CHECK(comm_checks == 2);
  // The event reached but the communicator failed (a collective that completed with garbage).
  CHECK(wait_collective([] { return EventPoll::reached; }, [] { return true; }, far) == WaitOutcome::failed);
  CHECK(wait_collective([] { return EventPoll::failed; }, healthy, far) == WaitOutcome::failed);
}
