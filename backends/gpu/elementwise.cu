// Elementwise kernels: every unary/binary functor of core/kernels through one grid-stride
// kernel each, plus where, copy (with dtype conversion), fill and the Philox random kernels.
#include "common.h"
#include "tessera/kernels/activation.h"
#include "tessera/kernels/binary.h"
#include "tessera/kernels/convert.h"
#include "tessera/kernels/random_draw.h"
#include "../common/random_params.h"
#include "tessera/kernels/unary.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {
namespace {

template <class Fn, class T>
TESSERA_GLOBAL void unary_kernel(int64_t n, T* out, const T* a, Indexer<2> ix) {
  using C = compute_t<T>;
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t o[2];
    ix.offsets(i, o);
    out[o[0]] = static_cast<T>(Fn{}(static_cast<C>(a[o[1]])));
  }
}

template <class Fn, class T, class O>
TESSERA_GLOBAL void binary_kernel(int64_t n, O* out, const T* a, const T* b, Indexer<3> ix) {
  using C = compute_t<T>;
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t o[3];
    ix.offsets(i, o);
    out[o[0]] = static_cast<O>(Fn{}(static_cast<C>(a[o[1]]), static_cast<C>(b[o[2]])));
  }
}

// Contiguous fast path: each thread moves 16 bytes of the input per load (Pack, common.h), so
// the kernels run at the bandwidth limit rather than the load-issue limit; the tail shorter
// than one pack is done element by element.

template <class Fn, class T>
TESSERA_GLOBAL void unary_vec_kernel(int64_t n, T* out, const T* a) {
  using C = compute_t<T>;
  constexpr int N = kPack<T>;
  const int64_t packs = n / N;
  for (int64_t i = global_index(); i < packs; i += grid_stride()) {
    const Pack<T, N> x = reinterpret_cast<const Pack<T, N>*>(a)[i];
    Pack<T, N> y;
    TESSERA_UNROLL
    for (int j = 0; j < N; ++j) y.v[j] = static_cast<T>(Fn{}(static_cast<C>(x.v[j])));
    reinterpret_cast<Pack<T, N>*>(out)[i] = y;
  }
  for (int64_t i = packs * N + global_index(); i < n; i += grid_stride()) out[i] = static_cast<T>(Fn{}(static_cast<C>(a[i])));
}

template <class Fn, class T, class O>
TESSERA_GLOBAL void binary_vec_kernel(int64_t n, O* out, const T* a, const T* b) {
  using C = compute_t<T>;
  constexpr int N = kPack<T>;
  const int64_t packs = n / N;
  for (int64_t i = global_index(); i < packs; i += grid_stride()) {
    const Pack<T, N> x = reinterpret_cast<const Pack<T, N>*>(a)[i];
    const Pack<T, N> y = reinterpret_cast<const Pack<T, N>*>(b)[i];
    Pack<O, N> z;
    TESSERA_UNROLL
    for (int j = 0; j < N; ++j) z.v[j] = static_cast<O>(Fn{}(static_cast<C>(x.v[j]), static_cast<C>(y.v[j])));
    reinterpret_cast<Pack<O, N>*>(out)[i] = z;
  }
  for (int64_t i = packs * N + global_index(); i < n; i += grid_stride()) {
    out[i] = static_cast<O>(Fn{}(static_cast<C>(a[i]), static_cast<C>(b[i])));
  }
}

// A dense operand combined with a broadcast one over a [rows, cols] layout: the broadcast operand
// is a row of `cols` (row_of_cols: bias-like, `x + b[None, :]`) or a column of `rows` (`x + b[:, None]`,
// or a scalar with rows = 1). Thread g keeps column pack g % packs and walks the rows, so its
// broadcast pack is loaded once and no element pays an index division (the general kernel pays
// two 64-bit divisions per element: half the bandwidth on an H200).
template <class Fn, class T, class O>
TESSERA_GLOBAL void binary_bcast_kernel(int64_t rows, int64_t cols, O* out, const T* dense, const T* bcast, bool row_of_cols,
                                        bool bcast_first) {
  using C = compute_t<T>;
  constexpr int N = kPack<T>;
  const int64_t packs = cols / N, g = global_index(), threads = grid_stride();
  const int64_t row_step = threads >= packs ? threads / packs : 1;
  if (threads >= packs && g >= row_step * packs) return;
  const int64_t first_pack = threads >= packs ? g % packs : g, pack_step = threads >= packs ? packs : threads;
  for (int64_t p = first_pack; p < packs; p += pack_step) {
    Pack<T, N> b{};
    if (row_of_cols) b = reinterpret_cast<const Pack<T, N>*>(bcast)[p];
    for (int64_t r = threads >= packs ? g / packs : 0; r < rows; r += row_step) {
      const int64_t i = r * packs + p;
      if (!row_of_cols) {
        TESSERA_UNROLL
        for (int j = 0; j < N; ++j) b.v[j] = bcast[r];
      }
      const Pack<T, N> x = reinterpret_cast<const Pack<T, N>*>(dense)[i];
      Pack<O, N> z;
      TESSERA_UNROLL
      for (int j = 0; j < N; ++j) {
        const C d = static_cast<C>(x.v[j]), e = static_cast<C>(b.v[j]);
        z.v[j] = static_cast<O>(bcast_first ? Fn{}(e, d) : Fn{}(d, e));
      }
      reinterpret_cast<Pack<O, N>*>(out)[i] = z;
    }
  }
}

/** Whether every pointer is aligned for 16-byte packs of its element type. */
template <class T, class O> bool packable(bool contiguous, const void* out, const void* a, const void* b) {
  const auto aligned = [](const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  constexpr size_t N = kPack<T>;
  return contiguous && aligned(out, sizeof(O) * N) && aligned(a, sizeof(T) * N) && (!b || aligned(b, sizeof(T) * N));
}

template <class T>
TESSERA_GLOBAL void where_kernel(int64_t n, T* out, const bool* c, const T* a, const T* b, Indexer<4> ix) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t o[4];
    ix.offsets(i, o);
    out[o[0]] = c[o[1]] ? a[o[2]] : b[o[3]];
  }
}

template <class D, class S> TESSERA_GLOBAL void copy_kernel(int64_t n, D* out, const S* in, Indexer<2> ix) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t o[2];
    ix.offsets(i, o);
    out[o[0]] = kernels::convert<D, S>(in[o[1]]);
  }
}

template <class T> TESSERA_GLOBAL void fill_kernel(int64_t n, T* out, T value, Indexer<1> ix) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t o[1];
    ix.offsets(i, o);
    out[o[0]] = value;
  }
}

using kernels::RandomKind;

template <class T, RandomKind K>
TESSERA_GLOBAL void random_kernel(int64_t n, T* out, uint64_t seed, uint64_t offset, double a, double b) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) out[i] = kernels::random_draw<T, K>(seed, offset, i, a, b);
}

// ---- host launchers ----

template <class Fn, DTypePolicy P> void unary_op(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  Tensor& out = c.outputs[0];
  auto run = [&]<class T>() {
    const auto ix = make_indexer<2>(out.shape(), {&out, &x});
    if (packable<T, T>(ix.contiguous, out.data_ptr(), x.data_ptr(), nullptr)) {
      launch(unary_vec_kernel<Fn, T>, blocks_for(out.numel() / kPack<T> + 1), Grid{kThreads}, 0, false, out.numel(), ptr<T>(out), ptr<T>(x));
      return;
    }
    launch(unary_kernel<Fn, T>, blocks_for(out.numel()), Grid{kThreads}, 0, false, out.numel(), ptr<T>(out), ptr<T>(x), ix);
  };
  if constexpr (P == DTypePolicy::Float) backend_common::dispatch_float(x.dtype(), op_name(c.op).data(), run);
  else backend_common::dispatch_numeric(x.dtype(), op_name(c.op).data(), run);
}

template <class Fn, DTypePolicy P> void binary_op(const KernelCall& c) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  Tensor& out = c.outputs[0];
  auto run = [&]<class T, class O>() {
    const auto ix = make_indexer<3>(out.shape(), {&out, &a, &b});
    if (packable<T, O>(ix.contiguous, out.data_ptr(), a.data_ptr(), b.data_ptr())) {
      launch(binary_vec_kernel<Fn, T, O>, blocks_for(out.numel() / kPack<T> + 1), Grid{kThreads}, 0, false, out.numel(), ptr<O>(out),
             ptr<T>(a), ptr<T>(b));
      return;
    }
    if constexpr (kernels::is_float_like_v<T> && std::is_same_v<T, O>) {
      if (const auto bc = backend_common::dense_with_broadcast(ix, a, b);
          bc.found &&
          packable<T, O>(bc.cols % kPack<T> == 0, out.data_ptr(), bc.dense->data_ptr(), bc.row_of_cols ? bc.bcast->data_ptr() : nullptr)) {
        launch(binary_bcast_kernel<Fn, T, O>, blocks_for(out.numel() / kPack<T>), Grid{kThreads}, 0, false, bc.rows, bc.cols, ptr<O>(out),
               ptr<T>(*bc.dense), ptr<T>(*bc.bcast), bc.row_of_cols, bc.bcast == &a);
        return;
      }
    }
    launch(binary_kernel<Fn, T, O>, blocks_for(out.numel()), Grid{kThreads}, 0, false, out.numel(), ptr<O>(out), ptr<T>(a),
           ptr<T>(b), ix);
  };
  const char* name = op_name(c.op).data();
  if constexpr (P == DTypePolicy::Arith) {
    backend_common::dispatch_numeric(a.dtype(), name, [&]<class T>() { run.template operator()<T, T>(); });
  } else if constexpr (P == DTypePolicy::TrueDiv) {
    backend_common::dispatch_float(a.dtype(), name, [&]<class T>() { run.template operator()<T, T>(); });
  } else if constexpr (P == DTypePolicy::Compare) {
    backend_common::dispatch_all(a.dtype(), name, [&]<class T>() { run.template operator()<T, bool>(); });
  } else if constexpr (P == DTypePolicy::Bitwise) {
    backend_common::dispatch_integral(a.dtype(), name, [&]<class T>() { run.template operator()<T, T>(); });
  } else {
    run.template operator()<bool, bool>();
  }
}

void where_op(const KernelCall& c) {
  Tensor& out = c.outputs[0];
  backend_common::dispatch_all(out.dtype(), "where", [&]<class T>() {
    launch(where_kernel<T>, blocks_for(out.numel()), Grid{kThreads}, 0, false, out.numel(), ptr<T>(out), ptr<bool>(c.inputs[0]),
           ptr<T>(c.inputs[1]), ptr<T>(c.inputs[2]), make_indexer<4>(out.shape(), {&out, &c.inputs[0], &c.inputs[1], &c.inputs[2]}));
  });
}

void copy_op(const KernelCall& c) {
  const Tensor& src = c.inputs[0];
  Tensor& dst = c.outputs[0];
  backend_common::dispatch_all(dst.dtype(), "copy", [&]<class D>() {
    backend_common::dispatch_all(src.dtype(), "copy", [&]<class S>() {
      launch(copy_kernel<D, S>, blocks_for(dst.numel()), Grid{kThreads}, 0, false, dst.numel(), ptr<D>(dst), ptr<S>(src),
             make_indexer<2>(dst.shape(), {&dst, &src}));
    });
  });
}

void fill_op(const KernelCall& c) {
  Tensor& dst = c.outputs[0];
  backend_common::dispatch_all(dst.dtype(), "fill", [&]<class T>() {
    launch(fill_kernel<T>, blocks_for(dst.numel()), Grid{kThreads}, 0, false, dst.numel(), ptr<T>(dst),
           kernels::from_double<T>(c.attrs.value), make_indexer<1>(dst.shape(), {&dst}));
  });
}

// bias (length cols) is null, or added to saved to form z (bias_activation's backward).
template <class T>
TESSERA_GLOBAL void activation_backward_kernel(int64_t n, const T* g, const T* saved, const T* bias, int64_t cols, T* out, Activation act) {
  using C = compute_t<T>;
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const C z = bias ? static_cast<C>(saved[i]) + static_cast<C>(bias[i % cols]) : static_cast<C>(saved[i]);
    out[i] = static_cast<T>(kernels::activation_grad(act, static_cast<C>(g[i]), z));
  }
}

void activation_backward_op(const KernelCall& c) {
  Tensor& out = c.outputs[0];
  const bool has_bias = c.inputs.size() > 2 && c.inputs[2].defined();
  backend_common::dispatch_float(out.dtype(), "activation_backward", [&]<class T>() {
    launch(activation_backward_kernel<T>, blocks_for(out.numel()), Grid{kThreads}, 0, false, out.numel(), ptr<const T>(c.inputs[0]),
           ptr<const T>(c.inputs[1]), has_bias ? ptr<const T>(c.inputs[2]) : nullptr, out.size(-1), ptr<T>(out), c.attrs.activation);
  });
}

// y = act(x + bias[i % cols]): consecutive threads read consecutive x and bias elements.
template <class T> TESSERA_GLOBAL void bias_activation_kernel(int64_t n, const T* x, const T* bias, int64_t cols, T* out, Activation act) {
  using C = compute_t<T>;
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    out[i] = static_cast<T>(kernels::apply_activation(act, static_cast<C>(x[i]) + static_cast<C>(bias[i % cols])));
  }
}

void bias_activation_op(const KernelCall& c) {
  Tensor& out = c.outputs[0];
  backend_common::dispatch_float(out.dtype(), "bias_activation", [&]<class T>() {
    launch(bias_activation_kernel<T>, blocks_for(out.numel()), Grid{kThreads}, 0, false, out.numel(), ptr<const T>(c.inputs[0]),
           ptr<const T>(c.inputs[1]), out.size(-1), ptr<T>(out), c.attrs.activation);
  });
}

template <class T>
TESSERA_GLOBAL void dropout_add_kernel(int64_t n, const T* x, const T* residual, T* out, uint64_t seed, uint64_t offset, float keep,
                                       double scale) {
  // A thread per Philox block: 4 consecutive elements (a warp covers 128 contiguous elements).
  for (int64_t b = global_index(); b < (n + 3) / 4; b += grid_stride()) kernels::dropout_add_block(seed, offset, b, n, keep, scale, x, residual, out);
}

void dropout_add_op(const KernelCall& c) {
  Tensor& out = c.outputs[0];
  const float keep = static_cast<float>(1.0 - c.attrs.dropout_p);
  const double scale = 1.0 / (1.0 - c.attrs.dropout_p);
  backend_common::dispatch_float(out.dtype(), "dropout_add", [&]<class T>() {
    launch(dropout_add_kernel<T>, blocks_for((out.numel() + 3) / 4), Grid{kThreads}, 0, false, out.numel(), ptr<const T>(c.inputs[0]),
           c.inputs[1].defined() ? ptr<const T>(c.inputs[1]) : nullptr, ptr<T>(out), c.attrs.seed, c.attrs.offset, keep, scale);
  });
}

template <RandomKind K> void random_op(const KernelCall& c) {
  Tensor& out = c.outputs[0];
  // Plain doubles, not structured bindings: older clang (hipcc) and nvcc cannot capture those.
  const std::array<double, 2> params = backend_common::random_draw_params<K>(c.attrs.random);
  const double a = params[0], b = params[1];
  auto run = [&]<class T>() {
    launch(random_kernel<T, K>, blocks_for(out.numel()), Grid{kThreads}, 0, false, out.numel(), ptr<T>(out), c.attrs.seed, c.attrs.offset,
           a, b);
  };
  if constexpr (K == RandomKind::uniform || K == RandomKind::normal) backend_common::dispatch_float(out.dtype(), op_name(c.op).data(), run);
  else if constexpr (K == RandomKind::integer) backend_common::dispatch_numeric(out.dtype(), "randint", run);
  else backend_common::dispatch_all(out.dtype(), "bernoulli", run);
}
}  // namespace

void register_elementwise(KernelTable& table) {
#define TESSERA_UNARY_OP(id, name, fn, policy) table[OpId::id] = &unary_op<kernels::fn, DTypePolicy::policy>;
#define TESSERA_BINARY_OP(id, name, fn, policy) table[OpId::id] = &binary_op<kernels::fn, DTypePolicy::policy>;
#include "tessera/ops/op_list.inc"
  table[OpId::Where] = &where_op;
  table[OpId::Copy] = &copy_op;
  table[OpId::Fill] = &fill_op;
  table[OpId::RandUniform] = &random_op<RandomKind::uniform>;
  table[OpId::RandNormal] = &random_op<RandomKind::normal>;
  table[OpId::RandInt] = &random_op<RandomKind::integer>;
  table[OpId::Bernoulli] = &random_op<RandomKind::bernoulli>;
  table[OpId::DropoutAdd] = &dropout_add_op;
  table[OpId::ActivationBackward] = &activation_backward_op;
  table[OpId::BiasActivation] = &bias_activation_op;
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
