#pragma once
// Shared helpers for the suites: the device under test, random inputs in several memory
// layouts, conversion to the double-precision reference and tolerant comparison.
#include <string>
#include <vector>

#include "reference/reference.h"
#include "tessera/tessera.h"

namespace tessera::test {

/** The device this test binary targets: its main sets the default ("cpu", "emulated", ...);
 *  the environment variable TESSERA_TEST_DEVICE overrides it. */
Device device();
void set_default_device(const std::string& name);

/** Memory layouts every op is tried on. */
enum class Layout { contiguous, transposed, strided, broadcast };
const char* layout_name(Layout l);
inline constexpr Layout kLayouts[] = {Layout::contiguous, Layout::transposed, Layout::strided, Layout::broadcast};

/**
 * A tensor of `shape` and `dtype` on the test device holding seeded random values in
 * [lo, hi) (integers: the integer range), stored in `layout`:
 *   transposed: a permuted view of a tensor with the reversed shape,
 *   strided:    every other element of a larger buffer,
 *   broadcast:  an expanded view of a tensor with size 1 in the leading axis.
 */
Tensor make_input(const Shape& shape, DType dtype, uint64_t seed, double lo = -2.0, double hi = 2.0,
                  Layout layout = Layout::contiguous);

/** The tensor's values (any device, any layout) as a double reference. */
ref::Ref to_ref(const Tensor& t);

/** Default tolerances (relative, absolute) for results of `dtype`. */
struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance_for(DType dtype);

/**
 * Empty string when `got` matches `want` (shape, and values within tolerance; NaN matches
 * NaN, infinities match exactly), else a message naming the first mismatch.
 */
std::string compare(const Tensor& got, const ref::Ref& want, Tolerance tol);
std::string compare(const Tensor& got, const ref::Ref& want);

/** Rounds each reference value to what `dtype` can hold (integers wrap like C++). */
ref::Ref round_to(const ref::Ref& r, DType dtype);

/** Float dtypes and all numeric dtypes, for parameter loops. */
inline const std::vector<DType> kFloatTypes = {DType::f32, DType::f64, DType::f16, DType::bf16};
inline const std::vector<DType> kIntTypes = {DType::i8, DType::u8, DType::i32, DType::i64};

}  // namespace tessera::test
