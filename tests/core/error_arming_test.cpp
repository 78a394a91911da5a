// When a device error slot may be read (backends/gpu/error_arming.h): only for the streams the
// host waited for, so a report from a stream still running is neither read early nor lost.
#include <doctest/doctest.h>

#include "gpu/error_arming.h"

using tessera::gpu::ArmedStreams;

TEST_CASE("a device error slot is read for the stream that was waited for; other streams stay armed") {
  ArmedStreams armed;
  int copy = 0, compute = 0, idle = 0;
  CHECK_FALSE(armed.take(&compute));  // nothing queued: no read
  armed.arm(&copy);
  armed.arm(&compute);
  armed.arm(&compute);
  CHECK_FALSE(armed.take(&idle));  // a stream with no checking kernel: no read, nothing disarmed
  CHECK(armed.take(&compute));     // its kernels are done: read
  CHECK_FALSE(armed.take(&compute));
  CHECK(armed.armed());            // the copy stream's kernel may still run: not lost
  CHECK(armed.take(&copy));
  CHECK_FALSE(armed.armed());
  armed.arm(&copy);
  armed.arm(&compute);
  CHECK(armed.take(ArmedStreams::whole_device()));  // a device sync covers every stream
  CHECK_FALSE(armed.armed());
  CHECK_FALSE(armed.take(ArmedStreams::whole_device()));
  armed.arm(nullptr);  // the default stream's tag may be null (the emulator's)
  CHECK(armed.take(nullptr));
}
