#pragma once
// Graph capture: record the device work of a region (a training step's forward and backward)
// once, then replay it with one call: no per-op host work, no per-kernel launch latency. CUDA
// Graphs on NVIDIA, hipGraph on AMD, a replayable launch list on the emulated backend (so the
// capture logic runs in CI). A replay reruns the same kernels on the same memory: inputs are
// fed by copying into tensors that existed at capture time, outputs are read from the tensors
// the capture produced. Inside a capture, host synchronisations (item(), to_vector(), host
// copies) and random ops (their Philox offsets are launch arguments) are errors.
#include <memory>

#include "tessera/backend/backend.h"
#include "tessera/device.h"

namespace tessera {

class DeviceGraph {
 public:
  explicit DeviceGraph(Device device);
  ~DeviceGraph();
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  /** Whether `device`'s backend can capture graphs (false: run eagerly instead). */
  static bool supported(Device device);
  /** Starts recording the calling thread's work on the device. Memory allocated until
   *  capture_end comes from this graph's private pool. */
  void capture_begin();
  /** Ends the recording (nothing recorded has run yet: replay() runs it). */
  void capture_end();
  /** Runs the recorded work on the current stream. */
  void replay();
  bool captured() const { return exec_ != nullptr; }
  /** Kernels and copies recorded (0 where the vendor does not report it). */
  size_t nodes() const { return exec_ ? exec_->nodes() : 0; }
  Device device() const { return device_; }

 private:
  Device device_;
  bool capturing_ = false;
  std::unique_ptr<GraphExec> exec_;
};

namespace detail {
/** True while the calling thread captures a graph (ops refuse what cannot be replayed). */
bool graph_capturing();
}  // namespace detail

}  // namespace tessera
