#include "tessera/dtype.h"

#include <ostream>

#include "tessera/error.h"

namespace tessera {

namespace {
struct DTypeFacts {
  const char* name;
  const char* short_name;
  size_t size;
};
constexpr DTypeFacts kFacts[kNumDTypes] = {
    {"float32", "f32", 4}, {"float64", "f64", 8}, {"float16", "f16", 2}, {"bfloat16", "bf16", 2}, {"int8", "i8", 1},
    {"uint8", "u8", 1},    {"int32", "i32", 4},   {"int64", "i64", 8},   {"bool", "bool", 1},
};
const DTypeFacts& facts(DType dt) { return kFacts[static_cast<int>(dt)]; }

// Rank within a category for promotion; the categories are bool < integer < floating.
int category(DType dt) { return dt == DType::boolean ? 0 : (is_floating(dt) ? 2 : 1); }
}  // namespace

size_t itemsize(DType dt) { return facts(dt).size; }
const char* dtype_name(DType dt) { return facts(dt).name; }

DType parse_dtype(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (name == kFacts[i].name || name == kFacts[i].short_name) return static_cast<DType>(i);
  }
  throw Error(detail::concat("dtype: unknown dtype '", name, "'"));
}

bool is_floating(DType dt) { return dt == DType::f32 || dt == DType::f64 || dt == DType::f16 || dt == DType::bf16; }
bool is_integer(DType dt) { return dt == DType::i8 || dt == DType::u8 || dt == DType::i32 || dt == DType::i64; }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    if (a == DType::f64 || b == DType::f64) return DType::f64;
    if (a == DType::f32 || b == DType::f32) return DType::f32;
    return DType::f32;  // f16 with bf16: neither holds the other
  }
  // Integers: the wider wins; u8 with i8 needs a signed type holding both (no i16 here).
  auto rank = [](DType d) { return d == DType::i64 ? 3 : d == DType::i32 ? 2 : 1; };
  if ((a == DType::u8 && b == DType::i8) || (a == DType::i8 && b == DType::u8)) return DType::i32;
  return rank(a) >= rank(b) ? a : b;
}

std::ostream& operator<<(std::ostream& os, DType dt) { return os << dtype_name(dt); }

std::string DTypeSet::str() const {
  std::string out;
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto dt = static_cast<DType>(i);
    if (!contains(dt)) continue;
    if (!out.empty()) out += ", ";
    out += dtype_name(dt);
  }
  return out.empty() ? "none" : out;
}

}  // namespace tessera
