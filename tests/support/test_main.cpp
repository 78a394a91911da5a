// doctest main shared by every suite. Listing tests always works (CTest discovery runs the
// binary at build time on machines without a GPU). Running on a device that is missing exits
// with 77, which CTest reports as "skipped" with the reason printed — never as passed.
// After the tests, guard bytes of the device allocator are checked: a kernel that wrote past
// its output fails the run even if every value compared equal.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstring>
#include <iostream>

#include "support/test_device.h"

// Defined per executable by a generated source (tessera_use_test_main in tests/CMakeLists.txt),
// so this file compiles once for every test binary.
const char* tessera_test_default_device();

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    listing |= std::strncmp(argv[i], "--list", 6) == 0 || std::strncmp(argv[i], "-l", 2) == 0 ||
               std::strncmp(argv[i], "-h", 2) == 0 || std::strncmp(argv[i], "--help", 6) == 0;
  }
  doctest::Context context(argc, argv);
  if (listing) return context.run();

  tessera::test::set_default_device(tessera_test_default_device());
  const tessera::Device dev = tessera::test::device();
  tessera::Backend* backend = tessera::find_backend(dev.type);
  if (!backend || backend->device_count() <= dev.index) {
    std::cout << "SKIPPED: device " << dev.str() << " unavailable: "
              << (backend ? backend->unavailable_reason() : std::string("backend not compiled in")) << "\n";
    return 77;
  }
  const int rc = context.run();
  if (context.shouldExit()) return rc;
  const auto stats = tessera::memory_stats(dev);
  if (stats.guard_violations != 0) {
    std::cout << "FAILED: " << stats.guard_violations << " allocation guard violation(s) on " << dev.str()
              << " (a kernel wrote outside its output)\n";
    return rc ? rc : 1;
  }
  return rc;
}
