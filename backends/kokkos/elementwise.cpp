// Elementwise kernels: where, copy with dtype conversion, fill, the Philox random kernels and the
// fused optimizer updates; the unary and binary functors are in elementwise_unary.cpp and
// elementwise_binary.cpp, one file each: nvcc's device-lambda check compiles a file at a time,
// and one file holding all three took 108 s once the binary ops gained their run path, near
// the 120 s test limit.
#include <cmath>

#include "common.h"
#include "tessera/kernels/binary.h"
#include "tessera/kernels/convert.h"
#include "tessera/kernels/optim.h"
#include "tessera/kernels/activation.h"
#include "tessera/kernels/random_draw.h"
#include "../common/random_params.h"
#include "../common/tensor_list.h"
#include "tessera/kernels/unary.h"

namespace tessera::kokkos {
namespace {

template <class T> void where_impl(const KernelCall& c) {
  Tensor& out = c.outputs[0];
  T* o = ptr<T>(out);
  const bool* cond = ptr<const bool>(c.inputs[0]);
  const T* a = ptr<const T>(c.inputs[1]);
  const T* b = ptr<const T>(c.inputs[2]);
  const auto ix = make_indexer<4>(out.shape(), {&out, &c.inputs[0], &c.inputs[1], &c.inputs[2]});
  for_n("where", out.numel(), KOKKOS_LAMBDA(int64_t i) {
    int64_t off[4];
    ix.offsets(i, off);
    o[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
  });
}
void where_op(const KernelCall& c) {
  backend_common::dispatch_all(c.outputs[0].dtype(), "where", [&]<class T>() { where_impl<T>(c); });
}

template <class D, class S> void copy_impl(const Tensor& src, Tensor& dst) {
  D* o = ptr<D>(dst);
  const S* s = ptr<const S>(src);
  const auto ix = make_indexer<2>(dst.shape(), {&dst, &src});
  // Transposes and broadcasts (contiguous(), expand backward) walk runs: no per-element divisions.
  if (for_runs(
          "copy", ix, dst.numel(), KOKKOS_LAMBDA(const int64_t* off) { o[off[0]] = kernels::convert<D, S>(s[off[1]]); }))
    return;
  for_n("copy", dst.numel(), KOKKOS_LAMBDA(int64_t i) {
    int64_t off[2];
    ix.offsets(i, off);
    o[off[0]] = kernels::convert<D, S>(s[off[1]]);
  });
}
void copy_op(const KernelCall& c) {
  const Tensor& src = c.inputs[0];
  Tensor& dst = c.outputs[0];
  backend_common::dispatch_all(dst.dtype(), "copy", [&]<class D>() {
    backend_common::dispatch_all(src.dtype(), "copy", [&]<class S>() { copy_impl<D, S>(src, dst); });
  });
}

template <class T> void fill_impl(Tensor& dst, double scalar) {
  T* o = ptr<T>(dst);
  const T value = kernels::from_double<T>(scalar);
  const auto ix = make_indexer<1>(dst.shape(), {&dst});
  for_n("fill", dst.numel(), KOKKOS_LAMBDA(int64_t i) {
    int64_t off[1];
    ix.offsets(i, off);
    o[off[0]] = value;
  });
}
void fill_op(const KernelCall& c) {
  backend_common::dispatch_all(c.outputs[0].dtype(), "fill", [&]<class T>() { fill_impl<T>(c.outputs[0], c.attrs.value); });
}

using kernels::RandomKind;

template <class T, RandomKind K> void random_impl(const KernelCall& c) {
  Tensor& out = c.outputs[0];
  const uint64_t seed = c.attrs.seed, offset = c.attrs.offset;
  // Plain doubles, not structured bindings: older clang (hipcc) and nvcc cannot capture those.
  const std::array<double, 2> params = backend_common::random_draw_params<K>(c.attrs.random);
  const double a = params[0], b = params[1];
  T* o = ptr<T>(out);
  for_n(op_name(c.op).data(), out.numel(), KOKKOS_LAMBDA(int64_t i) { o[i] = kernels::random_draw<T, K>(seed, offset, i, a, b); });
}

template <Activation A, class T>
void activation_backward_impl(const KernelCall& c) {
  using C = compute_t<T>;
  const T* g = ptr<const T>(c.inputs[0]);
  const T* saved = ptr<const T>(c.inputs[1]);
  // bias_activation's backward: z = saved + bias along the last axis.
  const T* bias = c.inputs.size() > 2 && c.inputs[2].defined() ? ptr<const T>(c.inputs[2]) : nullptr;
  const int64_t cols = c.outputs[0].size(-1), n = c.outputs[0].numel();
  T* o = ptr<T>(c.outputs[0]);
  if (!bias) {
    for_n(
        "activation_backward", n,
        KOKKOS_LAMBDA(int64_t i) { o[i] = static_cast<T>(GradOf<A>{}(static_cast<C>(g[i]), static_cast<C>(saved[i]))); });
    return;
  }
  for_rows(
      "activation_backward", n / cols, cols, KOKKOS_LAMBDA(int64_t i, int64_t j) {
        const int64_t k = i * cols + j;
        o[k] = static_cast<T>(GradOf<A>{}(static_cast<C>(g[k]), static_cast<C>(saved[k]) + static_cast<C>(bias[j])));
      });
}

template <Activation A, class T>
void bias_activation_impl(const KernelCall& c) {
  using C = compute_t<T>;
  const T* x = ptr<const T>(c.inputs[0]);
  const T* bias = ptr<const T>(c.inputs[1]);
  const int64_t cols = c.outputs[0].size(-1), n = c.outputs[0].numel();
  T* o = ptr<T>(c.outputs[0]);
  for_rows(
      "bias_activation", n / cols, cols, KOKKOS_LAMBDA(int64_t i, int64_t j) {
        const int64_t k = i * cols + j;
        o[k] = static_cast<T>(ActOf<A>{}(static_cast<C>(x[k]) + static_cast<C>(bias[j])));
      });
}

void bias_activation_op(const KernelCall& c) {
  if (c.outputs[0].numel() == 0) return;
  backend_common::dispatch_float(c.outputs[0].dtype(), "bias_activation", [&]<class T>() {
    backend_common::dispatch_activation(c.attrs.activation, [&]<Activation A>() { bias_activation_impl<A, T>(c); });
  });
}
void activation_backward_op(const KernelCall& c) {
  if (c.outputs[0].numel() == 0) return;
  backend_common::dispatch_float(c.outputs[0].dtype(), "activation_backward", [&]<class T>() {
    backend_common::dispatch_activation(c.attrs.activation, [&]<Activation A>() { activation_backward_impl<A, T>(c); });
  });
}

template <class T> void dropout_add_impl(const KernelCall& c) {
  const T* x = ptr<const T>(c.inputs[0]);
  const T* r = c.inputs[1].defined() ? ptr<const T>(c.inputs[1]) : nullptr;
  T* o = ptr<T>(c.outputs[0]);
  const uint64_t seed = c.attrs.seed, offset = c.attrs.offset;
  const float keep = static_cast<float>(1.0 - c.attrs.dropout_p);
  const double scale = 1.0 / (1.0 - c.attrs.dropout_p);
  const int64_t n = c.outputs[0].numel();
  for_n(
      "dropout_add", (n + 3) / 4, KOKKOS_LAMBDA(int64_t b) { kernels::dropout_add_block(seed, offset, b, n, keep, scale, x, r, o); }, 4);
}

void dropout_add_op(const KernelCall& c) {
  backend_common::dispatch_float(c.outputs[0].dtype(), "dropout_add", [&]<class T>() { dropout_add_impl<T>(c); });
}

template <RandomKind K> void random_op(const KernelCall& c) {
  const DType dt = c.outputs[0].dtype();
  auto run = [&]<class T>() { random_impl<T, K>(c); };
  if constexpr (K == RandomKind::uniform || K == RandomKind::normal) backend_common::dispatch_float(dt, op_name(c.op).data(), run);
  else if constexpr (K == RandomKind::integer) backend_common::dispatch_numeric(dt, "randint", run);
  else backend_common::dispatch_all(dt, "bernoulli", run);
}

template <class T> void adam_impl(const KernelCall& c) {
  using C = compute_t<T>;
  T* p = ptr<T>(c.outputs[0]);
  T* m = ptr<T>(c.outputs[1]);
  T* v = ptr<T>(c.outputs[2]);
  const T* g = ptr<const T>(c.inputs[0]);
  const kernels::AdamStep<C> step(c.attrs.optim);
  for_n("adam_update", c.outputs[0].numel(), KOKKOS_LAMBDA(int64_t i) {
    C pc = static_cast<C>(p[i]), mc = static_cast<C>(m[i]), vc = static_cast<C>(v[i]);
    step(pc, mc, vc, static_cast<C>(g[i]));
    p[i] = static_cast<T>(pc), m[i] = static_cast<T>(mc), v[i] = static_cast<T>(vc);
  });
}
// One team per block of kAdamBlock elements of one tensor: the block's tensor is found once (not
// per element, as a flat loop over the list must), and its elements are a plain loop over direct
// pointers on the team's threads and lanes, which vectorises on the host.
constexpr int64_t kAdamBlock = 4096;
struct BlockIndex {
  int64_t first[backend_common::kMaxTensors + 1];  // first block of each tensor
  int count = 0;
  KOKKOS_INLINE_FUNCTION int find(int64_t b) const {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (first[mid] <= b) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
};
template <class T> void adam_multi_impl(const KernelCall& c) {
  using C = compute_t<T>;
  const size_t k = c.inputs.size();
  const kernels::AdamStep<C> step(c.attrs.optim);
  const int vector = std::min(8, TeamPolicy::vector_length_max());
  for (size_t first = 0; first < k; first += backend_common::kMaxTensors) {
    const auto list = backend_common::adam_list<T>(c, first);
    BlockIndex blocks;
    blocks.count = list.count;
    blocks.first[0] = 0;
    for (int t = 0; t < list.count; ++t)
      blocks.first[t + 1] = blocks.first[t] + (list.start[t + 1] - list.start[t] + kAdamBlock - 1) / kAdamBlock;
    if (blocks.first[list.count] == 0) continue;
    Kokkos::parallel_for(
        "adam_multi_update", team_policy(blocks.first[list.count], vector), KOKKOS_LAMBDA(const Team& team) {
          const int t = blocks.find(team.league_rank());
          const int64_t j0 = (team.league_rank() - blocks.first[t]) * kAdamBlock;
          const int64_t left = list.start[t + 1] - list.start[t] - j0, n = left < kAdamBlock ? left : kAdamBlock;
          T* p = list.p[t] + j0;
          T* m = list.m[t] + j0;
          T* v = list.v[t] + j0;
          const T* g = list.g[t] + j0;
          team_vector_for(team, n, [&](int64_t j) {
            C pc = static_cast<C>(p[j]), mc = static_cast<C>(m[j]), vc = static_cast<C>(v[j]);
            step(pc, mc, vc, static_cast<C>(g[j]));
            p[j] = static_cast<T>(pc), m[j] = static_cast<T>(mc), v[j] = static_cast<T>(vc);
          });
        });
  }
}
void adam_multi_op(const KernelCall& c) {
  backend_common::dispatch_float(c.outputs[0].dtype(), "adam_multi_update", [&]<class T>() { adam_multi_impl<T>(c); });
}
void adam_op(const KernelCall& c) {
  backend_common::dispatch_float(c.outputs[0].dtype(), "adam_update", [&]<class T>() { adam_impl<T>(c); });
}

template <class T> void sgd_impl(const KernelCall& c) {
  using C = compute_t<T>;
  T* p = ptr<T>(c.outputs[0]);
  T* buf = ptr<T>(c.outputs[1]);
  const T* g = ptr<const T>(c.inputs[0]);
  const kernels::SgdStep<C> step(c.attrs.optim);
  const bool has_buf = c.attrs.optim.momentum != 0;
  for_n("sgd_update", c.outputs[0].numel(), KOKKOS_LAMBDA(int64_t i) {
    C pc = static_cast<C>(p[i]), bc = has_buf ? static_cast<C>(buf[i]) : C(0);
    step(pc, bc, static_cast<C>(g[i]));
    p[i] = static_cast<T>(pc);
    if (has_buf) buf[i] = static_cast<T>(bc);
  });
}
void sgd_op(const KernelCall& c) {
  backend_common::dispatch_float(c.outputs[0].dtype(), "sgd_update", [&]<class T>() { sgd_impl<T>(c); });
}
}  // namespace

void register_elementwise(KernelTable& table) {
  register_elementwise_unary(table);
  register_elementwise_binary(table);
  table[OpId::Where] = &where_op;
  table[OpId::Copy] = &copy_op;
  table[OpId::Fill] = &fill_op;
  table[OpId::RandUniform] = &random_op<RandomKind::uniform>;
  table[OpId::DropoutAdd] = &dropout_add_op;
  table[OpId::ActivationBackward] = &activation_backward_op;
  table[OpId::BiasActivation] = &bias_activation_op;
  table[OpId::RandNormal] = &random_op<RandomKind::normal>;
  table[OpId::RandInt] = &random_op<RandomKind::integer>;
  table[OpId::Bernoulli] = &random_op<RandomKind::bernoulli>;
  table[OpId::AdamUpdate] = &adam_op;
  table[OpId::AdamMultiUpdate] = &adam_multi_op;
  table[OpId::SgdUpdate] = &sgd_op;
}

}  // namespace tessera::kokkos
