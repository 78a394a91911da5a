#pragma once
// OpId and the op table, expanded from op_list.inc (the one op list).
#include <cstdint>
#include <string_view>

namespace tessera {

/** Identifies a kernel-backed op; indexes every backend's kernel table. */
enum class OpId : uint16_t {
#define TESSERA_OP(id, name) id,
#include "tessera/ops/op_list.inc"
};

inline constexpr int kOpCount = 0
#define TESSERA_OP(id, name) +1
#include "tessera/ops/op_list.inc"
    ;

/** How an elementwise op treats dtypes (see op_list.inc). */
enum class DTypePolicy : uint8_t { None, Float, Numeric, Arith, TrueDiv, Compare, Logical, Bitwise };
enum class OpKind : uint8_t { Unary, Binary, Other };

struct OpInfo {
  std::string_view name;
  OpKind kind;
  DTypePolicy policy;
};

inline constexpr OpInfo kOpInfo[] = {
#define TESSERA_OP(id, name) {name, OpKind::Other, DTypePolicy::None},
#define TESSERA_UNARY_OP(id, name, fn, policy) {name, OpKind::Unary, DTypePolicy::policy},
#define TESSERA_BINARY_OP(id, name, fn, policy) {name, OpKind::Binary, DTypePolicy::policy},
#include "tessera/ops/op_list.inc"
};
static_assert(sizeof(kOpInfo) / sizeof(kOpInfo[0]) == kOpCount);

inline constexpr const OpInfo& op_info(OpId op) { return kOpInfo[static_cast<int>(op)]; }
inline constexpr std::string_view op_name(OpId op) { return op_info(op).name; }

}  // namespace tessera
