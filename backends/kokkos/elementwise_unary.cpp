// The unary functors of core/kernels (op_list.inc), each through one Kokkos loop: flat over
// contiguous operands, else per-element offsets. The same functors the CPU and GPU backends run.
// (No for_runs path as the binary ops have: strided unary inputs are rare, and it would double
// the instantiations nvcc's device-lambda check compiles.)
#include <cmath>

#include "common.h"
#include "tessera/kernels/unary.h"

namespace tessera::kokkos {
namespace {

// Kernel bodies live in named function templates: nvcc rejects device lambdas defined inside
// generic lambdas (the dtype dispatchers), so the dispatchers only call these.
template <class Fn, class T>
void unary_impl(const KernelCall& c) {
  using C = compute_t<T>;
  const Tensor& x = c.inputs[0];
  Tensor& out = c.outputs[0];
  T* o = ptr<T>(out);
  const T* a = ptr<const T>(x);
  const auto ix = make_indexer<2>(out.shape(), {&out, &x});
  if (ix.contiguous) {
    for_n(
        op_name(c.op).data(), out.numel(), KOKKOS_LAMBDA(int64_t i) { o[i] = static_cast<T>(Fn{}(static_cast<C>(a[i]))); });
    return;
  }
  for_n(
      op_name(c.op).data(), out.numel(), KOKKOS_LAMBDA(int64_t i) {
        int64_t off[2];
        ix.offsets(i, off);
        o[off[0]] = static_cast<T>(Fn{}(static_cast<C>(a[off[1]])));
      });
}

template <class Fn, DTypePolicy P>
void unary_op(const KernelCall& c) {
  auto run = [&]<class T>() { unary_impl<Fn, T>(c); };
  if constexpr (P == DTypePolicy::Float) backend_common::dispatch_float(c.inputs[0].dtype(), op_name(c.op).data(), run);
  else backend_common::dispatch_numeric(c.inputs[0].dtype(), op_name(c.op).data(), run);
}

}  // namespace

void register_elementwise_unary(KernelTable& table) {
#define TESSERA_UNARY_OP(id, name, fn, policy) table[OpId::id] = &unary_op<fast_t<kernels::fn>, DTypePolicy::policy>;
#include "tessera/ops/op_list.inc"
}

}  // namespace tessera::kokkos
