// matmul, linear (fused bias + activation) and conv2d forward / input-grad / weight-grad, all
// through one team-tiled GEMM: a team computes a 32x32 output tile, staging 32-deep slabs of A
// and B in team scratch memory between team barriers. Rows of the tile go to team threads and
// columns to vector lanes, so the same code runs with team size 1 (Serial) and with real
// teams on GPUs. Operands are read through loader functors: matmul reads strided matrices,
// convolution reads the implicit im2col matrix (backends/common/nn_geometry.h). f32/f64 products
// go to KokkosBlas::gemm instead when Kokkos Kernels was found (linalg_blas.cpp).
#include "../common/nn_geometry.h"
#include "common.h"
#include "linalg_blas.h"
#include "tessera/kernels/activation.h"
#include "tessera/kernels/convert.h"

namespace tessera::kokkos {
namespace {
using namespace backend_common::nn;

constexpr int kTile = 32;  // output tile is kTile x kTile; K is walked kTile at a time
using Scratch = Exec::scratch_memory_space;

template <class T> using acc_t = std::conditional_t<kernels::is_float_like_v<T>, compute_t<T>, int64_t>;

/** Computes the output tile (tile_row, tile_col) of an m x n x k product and stores it. */
template <class Acc, class LoadA, class LoadB, class Store>
KOKKOS_INLINE_FUNCTION void team_gemm_tile(const Team& team, int64_t m, int64_t n, int64_t k, int64_t tile_row, int64_t tile_col,
                                           const LoadA& load_a, const LoadB& load_b, const Store& store) {
  Acc* as = static_cast<Acc*>(team.team_scratch(0).get_shmem(sizeof(Acc) * kTile * kTile));
  Acc* bs = static_cast<Acc*>(team.team_scratch(0).get_shmem(sizeof(Acc) * kTile * kTile));
  Acc* cs = static_cast<Acc*>(team.team_scratch(0).get_shmem(sizeof(Acc) * kTile * kTile));
  const int64_t r0 = tile_row * kTile, c0 = tile_col * kTile;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile * kTile), [&](int i) { cs[i] = Acc(0); });
  for (int64_t p0 = 0; p0 < k; p0 += kTile) {
    team.team_barrier();  // the previous slab is consumed before it is overwritten
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile * kTile), [&](int i) {
      const int r = i / kTile, q = i % kTile;
      as[i] = (r0 + r < m && p0 + q < k) ? static_cast<Acc>(load_a(r0 + r, p0 + q)) : Acc(0);
      bs[i] = (p0 + r < k && c0 + q < n) ? static_cast<Acc>(load_b(p0 + r, c0 + q)) : Acc(0);
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile), [&](int r) {
      for (int q = 0; q < kTile; ++q) {
        const Acc a = as[r * kTile + q];
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, kTile), [&](int col) {
          // Integer products wrap (kernels::wrap_t) instead of overflowing: defined, as in PyTorch.
          using W = kernels::wrap_t<Acc>;
          cs[r * kTile + col] = static_cast<Acc>(static_cast<W>(cs[r * kTile + col]) + static_cast<W>(a) * static_cast<W>(bs[q * kTile + col]));
        });
      }
    });
  }
  team.team_barrier();
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile * kTile), [&](int i) {
    const int64_t r = r0 + i / kTile, col = c0 + i % kTile;
    if (r < m && col < n) store(r, col, cs[i]);
  });
}

struct Tiles {
  int64_t m, n, k, tiles_m, tiles_n;
  KOKKOS_INLINE_FUNCTION int64_t per_slice() const { return tiles_m * tiles_n; }
};
inline Tiles tiles(int64_t m, int64_t n, int64_t k) { return {m, n, k, (m + kTile - 1) / kTile, (n + kTile - 1) / kTile}; }

/** A league of `slices` x tiles teams with the GEMM's scratch; body(team, slice, ti, tj). */
template <class Acc, class Body> void launch_tiles(const char* name, const Tiles& t, int64_t slices, const Body& body) {
  const int64_t league = slices * t.per_slice();
  if (league == 0) return;
  const int vector = std::min(8, TeamPolicy::vector_length_max());
  const TeamPolicy policy = team_policy(league, vector).set_scratch_size(0, Kokkos::PerTeam(3 * sizeof(Acc) * kTile * kTile));
  Kokkos::parallel_for(name, policy, KOKKOS_LAMBDA(const Team& team) {
    const int64_t id = team.league_rank(), per = t.per_slice();
    body(team, id / per, (id % per) / t.tiles_n, id % t.tiles_n);
  });
}

struct MatmulArgs {
  int64_t ars, acs, brs, bcs, ldc, bias_stride;
  Indexer<3> batch;  // element offsets of a, b, c for each batch index
  Activation act;
};

template <class T> void run_gemm(const char* name, const T* a, const T* b, T* c, const T* bias, const MatmulArgs g, const Tiles t, int64_t batches) {
  using Acc = acc_t<T>;
  launch_tiles<Acc>(name, t, batches, KOKKOS_LAMBDA(const Team& team, int64_t bi, int64_t ti, int64_t tj) {
    // Captures are first used outside the `if constexpr` below (an nvcc rule for device lambdas).
    const T* bias_p = bias;
    const int64_t bias_stride = g.bias_stride, ldc = g.ldc;
    const Activation act = g.act;
    int64_t off[3];
    g.batch.offsets(bi, off);
    const T* ab = a + off[0];
    const T* bb = b + off[1];
    T* cb = c + off[2];
    team_gemm_tile<Acc>(
        team, t.m, t.n, t.k, ti, tj, [&](int64_t r, int64_t q) { return static_cast<compute_t<T>>(ab[r * g.ars + q * g.acs]); },
        [&](int64_t q, int64_t col) { return static_cast<compute_t<T>>(bb[q * g.brs + col * g.bcs]); },
        [&](int64_t r, int64_t col, Acc acc) {
          if constexpr (kernels::is_float_like_v<T>) {
            if (bias_p) acc += static_cast<Acc>(static_cast<compute_t<T>>(bias_p[col * bias_stride]));
            cb[r * ldc + col] = static_cast<T>(kernels::apply_activation(act, acc));
          } else {
            cb[r * ldc + col] = static_cast<T>(acc);
          }
        });
  });
}

void matmul_op(const KernelCall& call) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  Tensor& out = call.outputs[0];
  if (blas_matmul(call)) return;
  const int64_t r = out.dim();
  MatmulArgs g{};
  g.ars = a.strides()[r - 2], g.acs = a.strides()[r - 1], g.brs = b.strides()[r - 2], g.bcs = b.strides()[r - 1];
  g.ldc = out.shape()[r - 1];
  g.act = Activation::none;
  g.batch = backend_common::matmul_batch_indexer(a, b, out);
  const Tiles t = tiles(out.shape()[r - 2], out.shape()[r - 1], a.shape()[r - 1]);
  const int64_t batches = out.numel() / std::max<int64_t>(t.m * t.n, 1);
  backend_common::dispatch_numeric(a.dtype(), "matmul", [&]<class T>() {
    run_gemm<T>("matmul", ptr<const T>(a), ptr<const T>(b), ptr<T>(out), nullptr, g, t, batches);
  });
}

void linear_op(const KernelCall& call) {
  if (blas_linear(call)) return;
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const Tensor& bias = call.inputs[2];
  Tensor& out = call.outputs[0];
  MatmulArgs g{};
  g.ars = x.strides()[0], g.acs = x.strides()[1];
  g.brs = w.strides()[1], g.bcs = w.strides()[0];  // B = w^T, read in place
  g.ldc = w.shape()[0];
  g.act = call.attrs.activation;
  g.bias_stride = bias.defined() ? bias.strides()[0] : 0;
  g.batch.contiguous = false;  // a single batch at offset 0
  const Tiles t = tiles(x.shape()[0], w.shape()[0], x.shape()[1]);
  backend_common::dispatch_float(x.dtype(), "linear", [&]<class T>() {
    run_gemm<T>("linear", ptr<const T>(x), ptr<const T>(w), ptr<T>(out), opt<T>(bias), g, t, 1);
  });
}

template <class F> void conv_dispatch(DType dt, const char* op, F&& f) {
  if (dt == DType::f32) f.template operator()<float>();
  else if (dt == DType::f64) f.template operator()<double>();
  else if (dt == DType::f16) f.template operator()<Half>();  // 16-bit views, f32 accumulation (acc_t)
  else if (dt == DType::bf16) f.template operator()<BFloat16>();
  else throw Error(detail::concat(op, ": supports floating dtypes on the kokkos backend, got ", dt));
}

Tiles tiles(const ConvGemm& g) { return tiles(g.m, g.n, g.k); }

// The convolution bodies are named templates: nvcc allows no device lambda inside the
// generic lambda of the dtype dispatch.
template <class T> void conv_fwd_impl(const KernelCall& c, const ConvDims d, const Tiles t) {
  using Acc = acc_t<T>;  // f16/bf16 views accumulate in f32
  const T* x = ptr<const T>(c.inputs[0]);
  const T* w = ptr<const T>(c.inputs[1]);
  const T* bias = opt<T>(c.inputs[2]);
  T* y = ptr<T>(c.outputs[0]);
  launch_tiles<Acc>("conv2d", t, d.groups, KOKKOS_LAMBDA(const Team& team, int64_t g, int64_t ti, int64_t tj) {
    const int64_t og = d.o / d.groups;
    team_gemm_tile<Acc>(
        team, t.m, t.n, t.k, ti, tj, [&](int64_t oo, int64_t q) { return static_cast<Acc>(w[(g * og + oo) * t.k + q]); },
        [&](int64_t q, int64_t col) { return im2col_at<Acc>(d, x, g, q, col); },
        [&](int64_t oo, int64_t col, Acc acc) {
          y[fwd_out_offset(d, g, oo, col)] = static_cast<T>(bias ? acc + static_cast<Acc>(bias[g * og + oo]) : acc);
        });
  });
}

template <class T> void conv_dgrad_impl(const KernelCall& c, const ConvDims d, const Tiles t) {
  using Acc = acc_t<T>;
  const T* gout = ptr<const T>(c.inputs[0]);
  const T* w = ptr<const T>(c.inputs[1]);
  T* dx = ptr<T>(c.outputs[0]);
  launch_tiles<Acc>("conv2d_input_grad", t, d.groups, KOKKOS_LAMBDA(const Team& team, int64_t g, int64_t ti, int64_t tj) {
    team_gemm_tile<Acc>(
        team, t.m, t.n, t.k, ti, tj, [&](int64_t ci, int64_t q) { return dgrad_w_at<Acc>(d, w, g, ci, q); },
        [&](int64_t q, int64_t col) { return dgrad_gout_at<Acc>(d, gout, g, q, col); },
        [&](int64_t ci, int64_t col, Acc acc) { dx[dgrad_dx_offset(d, g, ci, col)] = static_cast<T>(acc); });
  });
}

template <class T> void conv_wgrad_impl(const KernelCall& c, const ConvDims d, const Tiles t) {
  using Acc = acc_t<T>;
  const T* gout = ptr<const T>(c.inputs[0]);
  const T* x = ptr<const T>(c.inputs[1]);
  T* dw = ptr<T>(c.outputs[0]);
  launch_tiles<Acc>("conv2d_weight_grad", t, d.groups, KOKKOS_LAMBDA(const Team& team, int64_t g, int64_t ti, int64_t tj) {
    const int64_t og = d.o / d.groups;
    team_gemm_tile<Acc>(
        team, t.m, t.n, t.k, ti, tj, [&](int64_t oo, int64_t r) { return wgrad_gout_at<Acc>(d, gout, g, oo, r); },
        [&](int64_t r, int64_t q) { return im2col_at<Acc>(d, x, g, q, r); },
        [&](int64_t oo, int64_t q, Acc acc) { dw[(g * og + oo) * t.n + q] = static_cast<T>(acc); });
  });
}

void conv_fwd(const KernelCall& c) {
  if (blas_conv_fwd(c)) return;
  const ConvDims d = conv_dims(c.inputs[0].shape(), c.inputs[1].shape(), c.outputs[0].shape(), c.attrs);
  conv_dispatch(c.outputs[0].dtype(), "conv2d", [&]<class T>() { conv_fwd_impl<T>(c, d, tiles(fwd_gemm(d))); });
}

void conv_dgrad(const KernelCall& c) {
  if (blas_conv_dgrad(c)) return;
  const ConvDims d = conv_dims(c.outputs[0].shape(), c.inputs[1].shape(), c.inputs[0].shape(), c.attrs);
  conv_dispatch(c.outputs[0].dtype(), "conv2d_input_grad", [&]<class T>() { conv_dgrad_impl<T>(c, d, tiles(dgrad_gemm(d))); });
}

void conv_wgrad(const KernelCall& c) {
  if (blas_conv_wgrad(c)) return;
  const ConvDims d = conv_dims(c.inputs[1].shape(), c.outputs[0].shape(), c.inputs[0].shape(), c.attrs);
  conv_dispatch(c.outputs[0].dtype(), "conv2d_weight_grad", [&]<class T>() { conv_wgrad_impl<T>(c, d, tiles(wgrad_gemm(d))); });
}
}  // namespace

void register_linalg(KernelTable& table) {
  table[OpId::Matmul] = &matmul_op;
  table[OpId::Linear] = &linear_op;
  table[OpId::Conv2d] = &conv_fwd;
  table[OpId::Conv2dInputGrad] = &conv_dgrad;
  table[OpId::Conv2dWeightGrad] = &conv_wgrad;
}

}  // namespace tessera::kokkos
