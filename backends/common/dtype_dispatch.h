#pragma once
// Turns a run-time DType into a compile-time type for a templated lambda:
//   dispatch_float(dt, "exp", [&]<class T>() { ... });
#include "tessera/dtype.h"
#include "tessera/error.h"

namespace tessera::backend_common {

template <class F> void dispatch_float(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f64: f.template operator()<double>(); return;
    case DType::f16: f.template operator()<Half>(); return;
    case DType::bf16: f.template operator()<BFloat16>(); return;
    default: throw Error(detail::concat(op, ": kernel does not support dtype ", dt));
  }
}

template <class F> void dispatch_numeric(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::i8: f.template operator()<int8_t>(); return;
    case DType::u8: f.template operator()<uint8_t>(); return;
    case DType::i32: f.template operator()<int32_t>(); return;
    case DType::i64: f.template operator()<int64_t>(); return;
    default: dispatch_float(dt, op, static_cast<F&&>(f));
  }
}

template <class F> void dispatch_all(DType dt, const char* op, F&& f) {
  if (dt == DType::boolean) {
    f.template operator()<bool>();
    return;
  }
  dispatch_numeric(dt, op, static_cast<F&&>(f));
}

}  // namespace tessera::backend_common
