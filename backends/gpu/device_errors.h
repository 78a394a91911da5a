#pragma once
// Bad input found by a kernel (an index out of range, a class target out of range) is reported
// the way a device-side assert is: the kernel writes the first error into a small slot in
// device memory and goes on without touching memory out of bounds; the backend reads the slot
// at the next host synchronisation (a copy to the host, item(), synchronize) and throws
// tessera::Error naming the op. Validation therefore costs no host sync of its own (checking
// indices on the host took two reductions and two syncs per op).
#include <cstdint>
#include <string>

#include "runtime.h"
#include "tessera/ops/op_id.h"

namespace tessera::gpu {

enum DeviceErrorKind : int { kIndexOutOfRange = 1, kClassTargetOutOfRange = 2 };

/** The first error reported on a device; op == 0 means none. */
struct DeviceErrorSlot {
  int op = 0;    // OpId + 1
  int kind = 0;  // DeviceErrorKind
  int64_t value = 0, bound = 0, where = 0;
};

/** Records an error unless one is already pending (the first report wins). */
TESSERA_DEVICE void report_device_error(DeviceErrorSlot* s, int op, int kind, int64_t value, int64_t bound, int64_t where) {
  if (atomic_cas(&s->op, 0, op) == 0) {
    s->kind = kind;
    s->value = value;
    s->bound = bound;
    s->where = where;
  }
}

/** True when an error is pending: in-place kernels that follow a check kernel skip their writes. */
TESSERA_DEVICE bool device_error_pending(const DeviceErrorSlot* s) { return *static_cast<const volatile int*>(&s->op) != 0; }

/** The code kernels pass for `op`. */
inline int device_error_code(OpId op) { return static_cast<int>(op) + 1; }

/** The message for a reported error. */
inline std::string device_error_message(const DeviceErrorSlot& s) {
  const std::string_view op = s.op > 0 && s.op <= static_cast<int>(kOpCount) ? op_name(static_cast<OpId>(s.op - 1)) : "kernel";
  std::string msg(op);
  if (s.kind == kClassTargetOutOfRange) {
    msg += detail::concat(": target ", s.value, " at position ", s.where, " is out of range for ", s.bound, " classes");
  } else {
    msg += detail::concat(": index ", s.value, " is out of range for axis ", s.where, " of size ", s.bound);
  }
  return msg + " (found on the device; reported at the next synchronisation)";
}

}  // namespace tessera::gpu
