// Vendor-library state per (device, stream), released with its stream (backends/gpu/stream_cache.h).
#include <doctest/doctest.h>

#include <string>

#include "gpu/stream_cache.h"

using tessera::gpu::StreamCache;

TEST_CASE("vendor-library workspaces are made once per device and stream and freed with their stream") {
  struct Workspace {
    std::string name;
  };
  StreamCache<Workspace> cache;
  int made = 0, freed = 0;
  int stream_a = 0, stream_b = 0;
  const auto make = [&](Workspace& w) { w.name = "w" + std::to_string(++made); };
  Workspace& a0 = cache.get(0, &stream_a, make);
  CHECK(&cache.get(0, &stream_a, make) == &a0);  // the same entry every call: no handle per call
  Workspace& a1 = cache.get(1, &stream_a, make);
  Workspace& b0 = cache.get(0, &stream_b, make);
  CHECK(made == 3);
  CHECK(&a1 != &a0);
  cache.release_stream(&stream_a, [&](Workspace&) { ++freed; });
  CHECK(freed == 2);  // both devices' entries of the destroyed stream
  CHECK(cache.size() == 1);
  CHECK(b0.name == "w3");  // the other stream's entry is untouched
  // A new stream (even at the old one's address) gets a fresh entry.
  CHECK(cache.get(0, &stream_a, make).name == "w4");
  cache.release_stream(&stream_b, [&](Workspace&) { ++freed; });
  CHECK(freed == 3);
}
