#pragma once
// Turns a run-time DType (or fused activation) into a compile-time type (or value) for a
// templated lambda:
//   dispatch_float(dt, "exp", [&]<class T>() { ... });
//   dispatch_activation(act, [&]<Activation A>() { ... });
#include "tessera/dtype.h"
#include "tessera/error.h"
#include "tessera/kernels/activation.h"
#include "tessera/kernels/binary.h"
#include "tessera/kernels/scatter.h"

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

/** f.template operator()<A>() for the run-time activation `act`: each loop body is compiled per
 *  activation, so it vectorises without a per-element switch. */
template <class F>
void dispatch_activation(Activation act, F&& f) {
  switch (act) {
    case Activation::relu:
      f.template operator()<Activation::relu>();
      return;
    case Activation::gelu:
      f.template operator()<Activation::gelu>();
      return;
    case Activation::gelu_tanh:
      f.template operator()<Activation::gelu_tanh>();
      return;
    case Activation::silu:
      f.template operator()<Activation::silu>();
      return;
    case Activation::sigmoid:
      f.template operator()<Activation::sigmoid>();
      return;
    case Activation::tanh:
      f.template operator()<Activation::tanh>();
      return;
    case Activation::none:
      f.template operator()<Activation::none>();
      return;
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

/** scatter_reduce's combining functor for prod, amax and amin. */
template <class F> void dispatch_scatter_reduce(ScatterReduce r, F&& f) {
  switch (r) {
    case ScatterReduce::prod: f.template operator()<kernels::MulFn>(); return;
    case ScatterReduce::amax: f.template operator()<kernels::MaximumFn>(); return;
    case ScatterReduce::amin: f.template operator()<kernels::MinimumFn>(); return;
    default: throw Error("scatter_reduce: the kernel combines only prod, amax and amin (sum and mean are built on scatter_add)");
  }
}

/** The integer dtypes and bool (bitwise ops). */
template <class F> void dispatch_integral(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::boolean: f.template operator()<bool>(); return;
    case DType::i8: f.template operator()<int8_t>(); return;
    case DType::u8: f.template operator()<uint8_t>(); return;
    case DType::i32: f.template operator()<int32_t>(); return;
    case DType::i64: f.template operator()<int64_t>(); return;
    default: throw Error(detail::concat(op, ": kernel does not support dtype ", dt));
  }
}

}  // namespace tessera::backend_common
