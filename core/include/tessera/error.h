#pragma once
// Tessera's exceptions. Library code never aborts: user mistakes and vendor failures both
// surface as exceptions whose message names the op and the offending shapes/dtypes/devices.
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace tessera {

/** Base class of every exception Tessera throws. */
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/** An allocation failed even after the caching allocator released its cached blocks. */
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

/** The op exists but the backend has no kernel for it. */
class NotImplemented : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... Args> std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

}  // namespace tessera

/** Throws tessera::Error("<op>: <message parts...>") when `cond` is false. */
#define TESSERA_CHECK(cond, op, ...)                                                 \
  do {                                                                               \
    if (!(cond)) throw ::tessera::Error(::tessera::detail::concat(op, ": ", __VA_ARGS__)); \
  } while (0)
