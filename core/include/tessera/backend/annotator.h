#pragma once
// Backend SPI for the profiler (tessera/profiler.h): a backend whose vendor tools take named
// ranges (NVTX for Nsight Systems, roctx for rocprof) registers its push/pop here at start-up;
// while a profile records, every op span and profile::Scope is also pushed as such a range.

namespace tessera::profile::detail {

using RangePush = void (*)(const char* name);
using RangePop = void (*)();
/** Adds an annotator (at most 4; registering the same push twice is a no-op). */
void register_annotator(RangePush push, RangePop pop);

}  // namespace tessera::profile::detail
