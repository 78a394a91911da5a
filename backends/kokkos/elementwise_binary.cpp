// The binary functors of core/kernels (op_list.inc), each through one Kokkos loop: flat over
// contiguous operands, one team per long strided or broadcast run (for_runs: a bias row added to
// every row of a matrix), else per-element offsets.
#include <cmath>

#include "common.h"
#include "tessera/kernels/binary.h"

namespace tessera::kokkos {
namespace {

// Kernel bodies live in named function templates: nvcc rejects device lambdas defined inside
// generic lambdas (the dtype dispatchers), so the dispatchers only call these.
template <class Fn, class T, class O>
void binary_impl(const KernelCall& c) {
  using C = compute_t<T>;
  const Tensor& ta = c.inputs[0];
  const Tensor& tb = c.inputs[1];
  Tensor& out = c.outputs[0];
  const char* name = op_name(c.op).data();
  O* o = ptr<O>(out);
  const T* a = ptr<const T>(ta);
  const T* b = ptr<const T>(tb);
  const auto ix = make_indexer<3>(out.shape(), {&out, &ta, &tb});
  if (ix.contiguous) {
    for_n(
        name, out.numel(), KOKKOS_LAMBDA(int64_t i) { o[i] = static_cast<O>(Fn{}(static_cast<C>(a[i]), static_cast<C>(b[i]))); });
    return;
  }
  if (for_runs(
          name, ix, out.numel(),
          KOKKOS_LAMBDA(const int64_t* off) { o[off[0]] = static_cast<O>(Fn{}(static_cast<C>(a[off[1]]), static_cast<C>(b[off[2]]))); }))
    return;
  for_n(
      name, out.numel(), KOKKOS_LAMBDA(int64_t i) {
        int64_t off[3];
        ix.offsets(i, off);
        o[off[0]] = static_cast<O>(Fn{}(static_cast<C>(a[off[1]]), static_cast<C>(b[off[2]])));
      });
}

template <class Fn, DTypePolicy P>
void binary_op(const KernelCall& c) {
  const char* name = op_name(c.op).data();
  const DType dt = c.inputs[0].dtype();
  if constexpr (P == DTypePolicy::Arith) {
    backend_common::dispatch_numeric(dt, name, [&]<class T>() { binary_impl<Fn, T, T>(c); });
  } else if constexpr (P == DTypePolicy::TrueDiv) {
    backend_common::dispatch_float(dt, name, [&]<class T>() { binary_impl<Fn, T, T>(c); });
  } else if constexpr (P == DTypePolicy::Compare) {
    backend_common::dispatch_all(dt, name, [&]<class T>() { binary_impl<Fn, T, bool>(c); });
  } else if constexpr (P == DTypePolicy::Bitwise) {
    backend_common::dispatch_integral(dt, name, [&]<class T>() { binary_impl<Fn, T, T>(c); });
  } else {
    binary_impl<Fn, bool, bool>(c);
  }
}

}  // namespace

void register_elementwise_binary(KernelTable& table) {
#define TESSERA_BINARY_OP(id, name, fn, policy) table[OpId::id] = &binary_op<kernels::fn, DTypePolicy::policy>;
#include "tessera/ops/op_list.inc"
}

}  // namespace tessera::kokkos
