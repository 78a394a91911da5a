#pragma once
// Element types and PyTorch-style type promotion.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <string_view>

#include "tessera/kernels/half.h"

namespace tessera {

/** Element type of a tensor. `boolean` stores one byte per element (0 or 1). */
enum class DType : uint8_t { f32, f64, f16, bf16, i8, u8, i32, i64, boolean };
inline constexpr int kNumDTypes = 9;

/** Bytes per element. */
size_t itemsize(DType dt);
/** PyTorch-style name: "float32", "bfloat16", "int64", "bool", ... */
const char* dtype_name(DType dt);
/** Parses a dtype name ("float32" or its short form "f32"); throws tessera::Error if unknown. */
DType parse_dtype(std::string_view name);
/** True for f32, f64, f16, bf16. */
bool is_floating(DType dt);
/** True for the integer types (bool excluded). */
bool is_integer(DType dt);
/**
 * Result type of combining two tensors, like torch.promote_types: bool < integers < floats,
 * wider wins; u8 with i8 gives i32 (Tessera has no i16); f16 with bf16 gives f32.
 */
DType promote_types(DType a, DType b);
/** The float type computations on `dt` produce when the op is float-only (ints -> f32). */
inline DType to_floating(DType dt) { return is_floating(dt) ? dt : DType::f32; }

std::ostream& operator<<(std::ostream& os, DType dt);

/** A set of dtypes (a bit per DType): what a kernel accepts, what a backend lacks. */
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> dtypes) {
    for (DType dt : dtypes) bits_ |= bit(dt);
  }
  constexpr bool contains(DType dt) const { return (bits_ & bit(dt)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr DTypeSet operator|(DTypeSet o) const { return from_bits(bits_ | o.bits_); }
  constexpr DTypeSet operator&(DTypeSet o) const { return from_bits(bits_ & o.bits_); }
  constexpr DTypeSet operator-(DTypeSet o) const { return from_bits(bits_ & ~o.bits_); }
  constexpr bool operator==(const DTypeSet&) const = default;
  /** "float16, bfloat16" (names in DType order), "none" when empty. */
  std::string str() const;

 private:
  static constexpr uint16_t bit(DType dt) { return static_cast<uint16_t>(1u << static_cast<unsigned>(dt)); }
  static constexpr DTypeSet from_bits(uint16_t b) {
    DTypeSet s;
    s.bits_ = b;
    return s;
  }
  uint16_t bits_ = 0;
};
inline constexpr DTypeSet kFloatDTypes{DType::f32, DType::f64, DType::f16, DType::bf16};
inline constexpr DTypeSet kNumericDTypes = kFloatDTypes | DTypeSet{DType::i8, DType::u8, DType::i32, DType::i64};
inline constexpr DTypeSet kAllDTypes = kNumericDTypes | DTypeSet{DType::boolean};
/** The integer dtypes and bool (bitwise ops). */
inline constexpr DTypeSet kIntegralDTypes = kAllDTypes - kFloatDTypes;

/** Maps a C++ type to its DType (float -> f32, Half -> f16, bool -> boolean, ...). */
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::i8; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };
template <class T> inline constexpr DType dtype_of_v = dtype_of<T>::value;

}  // namespace tessera
