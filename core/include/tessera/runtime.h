#pragma once
// Process-level controls: threads, synchronisation and memory statistics.
#include "tessera/backend/allocator.h"
#include "tessera/device.h"

namespace tessera {

/** Worker threads for host-parallel backends (0 = all cores). */
void set_num_threads(int threads);
int num_threads();
/** Waits for all queued work on `device`. */
void synchronize(Device device = kCPU);
/** Allocator statistics of `device`. */
AllocatorStats memory_stats(Device device = kCPU);
/** Caps the bytes `device`'s allocator may reserve (0 = no cap). */
void set_memory_limit(Device device, int64_t bytes);
/** Returns cached blocks of `device`'s allocator to the system. */
void empty_cache(Device device = kCPU);

}  // namespace tessera
