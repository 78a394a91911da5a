#include "tessera/shape.h"

#include <algorithm>
#include <ostream>

#include "tessera/error.h"

namespace tessera {

int64_t numel(const Shape& shape) { return checked_numel(shape, "numel"); }

int64_t checked_numel(const Shape& shape, const char* op) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : shape) {
    TESSERA_CHECK(s >= 0, op, "negative size in shape ", shape_str(shape));
    overflow |= __builtin_mul_overflow(n, s, &n);
  }
  // A zero anywhere makes the count 0 whatever the other sizes; otherwise any overflow is fatal.
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
  TESSERA_CHECK(empty || !overflow, op, "shape ", shape_str(shape), " has more than 2^63 elements");
  return empty ? 0 : n;
}

int64_t checked_nbytes(const Shape& shape, size_t itemsize, const char* op) {
  int64_t bytes = 0;
  TESSERA_CHECK(!__builtin_mul_overflow(checked_numel(shape, op), static_cast<int64_t>(itemsize), &bytes), op, "shape ",
                shape_str(shape), " needs more than 2^63 bytes at ", itemsize, " bytes per element");
  return bytes;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    // Only a tensor with a zero-sized axis can overflow here (its element count is 0, checked
    // elsewhere, while the other sizes multiply past int64): saturate, it is never indexed.
    if (__builtin_mul_overflow(s, std::max<int64_t>(shape[i], 1), &s)) s = INT64_MAX;
  }
  return strides;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << shape_str(shape); }

int64_t normalize_axis(int64_t axis, int64_t rank, const char* op) {
  const int64_t lo = rank == 0 ? -1 : -rank, hi = rank == 0 ? 0 : rank - 1;  // 0-d accepts 0 and -1
  TESSERA_CHECK(axis >= lo && axis <= hi, op, "axis ", axis, " out of range for tensor of rank ", rank);
  return axis < 0 ? axis + std::max<int64_t>(rank, 1) : axis;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TESSERA_CHECK(da == db || da == 1 || db == 1, op, "shapes ", shape_str(a), " and ", shape_str(b),
                  " cannot be broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace tessera
