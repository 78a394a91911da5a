#include "tessera/graph.h"

#include "tessera/backend/registry.h"
#include "tessera/error.h"

namespace tessera {

namespace {
thread_local int t_capturing = 0;

// Makes the graph's device current for the backend call (captures and replays are per device).
struct DeviceScope {
  Backend& backend;
  int previous;
  DeviceScope(Backend& b, int d) : backend(b), previous(b.set_current_device(d)) {}
  ~DeviceScope() { backend.set_current_device(previous); }
};
}  // namespace

namespace detail {
bool graph_capturing() { return t_capturing > 0; }
}  // namespace detail

DeviceGraph::DeviceGraph(Device device) : device_(device) {}

DeviceGraph::~DeviceGraph() {
  if (capturing_) {
    // Abandoned mid-capture (an exception): stop recording and drop what was recorded.
    try {
      capture_end();
    } catch (...) {
    }
    exec_.reset();
  }
  if (Backend* b = find_backend(device_.type); b && b->device_count() > device_.index) b->allocator(device_.index).release_pool(this);
}

bool DeviceGraph::supported(Device device) {
  Backend* b = find_backend(device.type);
  return b && b->device_count() > device.index && b->supports_graphs();
}

void DeviceGraph::capture_begin() {
  TESSERA_CHECK(!capturing_ && !exec_, "graph capture", "this graph was already captured");
  TESSERA_CHECK(t_capturing == 0, "graph capture", "another capture is in progress on this thread");
  Backend& b = backend_for_device(device_, "graph capture");
  TESSERA_CHECK(b.supports_graphs(), "graph capture", "not supported on ", device_.str());
  const DeviceScope scope(b, device_.index);
  b.allocator(device_.index).set_capture_pool(this);
  try {
    b.begin_capture(device_.index);
  } catch (...) {
    b.allocator(device_.index).set_capture_pool(nullptr);
    throw;
  }
  capturing_ = true;
  ++t_capturing;
}

void DeviceGraph::capture_end() {
  TESSERA_CHECK(capturing_, "graph capture", "capture_end without capture_begin");
  Backend& b = backend_for_device(device_, "graph capture");
  const DeviceScope scope(b, device_.index);
  capturing_ = false;
  --t_capturing;
  b.allocator(device_.index).set_capture_pool(nullptr);
  exec_ = b.end_capture(device_.index);
}

void DeviceGraph::replay() {
  TESSERA_CHECK(exec_, "graph replay", "nothing captured");
  TESSERA_CHECK(t_capturing == 0, "graph replay", "cannot replay inside a capture");
  Backend& b = backend_for_device(device_, "graph replay");
  const DeviceScope scope(b, device_.index);
  exec_->replay();
}

}  // namespace tessera
