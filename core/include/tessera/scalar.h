#pragma once
// A number used as an op operand. Like a Python scalar in PyTorch it is "weakly typed": it
// never widens a tensor's dtype within its category (f16 tensor + 2.5 stays f16), but a
// floating scalar with an integer tensor gives float32.
#include <cstdint>
#include <type_traits>

namespace tessera {

class Scalar {
 public:
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : d_(static_cast<double>(v)), i_(static_cast<int64_t>(v)), integral_(true) {}  // NOLINT
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : d_(static_cast<double>(v)), i_(0), integral_(false) {}  // NOLINT
  Scalar(bool v) : d_(v ? 1.0 : 0.0), i_(v), integral_(true) {}  // NOLINT

  double to_double() const { return d_; }
  int64_t to_int() const { return integral_ ? i_ : static_cast<int64_t>(d_); }
  bool is_integral() const { return integral_; }

 private:
  double d_;
  int64_t i_;
  bool integral_;
};

}  // namespace tessera
