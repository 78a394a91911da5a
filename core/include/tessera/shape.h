#pragma once
// Shapes and strides (in elements, not bytes).
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace tessera {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

/** Product of the sizes (1 for a 0-d shape). */
int64_t numel(const Shape& shape);
/** Row-major strides for `shape`. */
Strides contiguous_strides(const Shape& shape);
/** "[2, 3]" — the form every error message uses. */
std::string shape_str(const Shape& shape);
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
