#pragma once
// Shapes and strides (in elements, not bytes).
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace tessera {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

/** Product of the sizes (1 for a 0-d shape); throws when it does not fit in int64_t. */
int64_t numel(const Shape& shape);
/**
 * The one place a shape becomes an element or byte count: throws tessera::Error
 * "<op>: shape [..] has a negative size" or "... has more than 2^63 elements/bytes" instead
 * of wrapping around (a wrapped count allocates a small buffer that kernels then overrun).
 */
int64_t checked_numel(const Shape& shape, const char* op);
int64_t checked_nbytes(const Shape& shape, size_t itemsize, const char* op);
/** Row-major strides for `shape`. */
Strides contiguous_strides(const Shape& shape);
/** "[2, 3]" — the form every error message uses. */
std::string shape_str(const Shape& shape);
/**
 * std::cout << t.shape() prints "[2, 3]" (libtorch prints sizes the same way). Shape is a
 * std::vector, so the operator is found where tessera's names are visible (inside namespace
 * tessera or after `using namespace tessera`); elsewhere write tessera::shape_str(s).
 */
std::ostream& operator<<(std::ostream& os, const Shape& shape);
/**
 * Normalises a possibly negative axis for a tensor of rank `rank`;
 * throws "<op>: axis A out of range for tensor of rank R".
 */
int64_t normalize_axis(int64_t axis, int64_t rank, const char* op);
/**
 * Broadcasts two shapes NumPy-style; throws "<op>: shapes [..] and [..] cannot be broadcast".
 */
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace tessera
