#pragma once
// doctest assertions on top of test_device.h.
#include <doctest/doctest.h>

#include "support/test_device.h"

/** Checks `got` against the reference `want` (default or explicit tolerance). */
#define TESSERA_CHECK_CLOSE(got, ...)                                   \
  do {                                                                  \
    const std::string tessera_err_ = ::tessera::test::compare(got, __VA_ARGS__); \
    CHECK_MESSAGE(tessera_err_.empty(), tessera_err_);                  \
  } while (0)

/** Checks that `expr` throws tessera::Error whose message contains `text`. */
#define TESSERA_CHECK_THROWS_WITH(expr, text) CHECK_THROWS_WITH_AS(expr, doctest::Contains(text), ::tessera::Error)
