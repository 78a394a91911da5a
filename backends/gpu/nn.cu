// nn kernels: convolution as implicit GEMM (forward, input-grad and weight-grad), pooling, batch/layer normalisation (a block per channel / row with block
// reductions) and fused cross entropy.
#include <cmath>

#include "common.h"
#include "kernels.h"
#include "../common/nn_geometry.h"
#include "tiled_gemm.h"
#include "tessera/kernels/convert.h"
#include "tessera/ops/reduction.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {
namespace {
using namespace backend_common::nn;

template <class T> using acc_t = compute_t<T>;

struct ConvTiles {
  int64_t m, n, k, tiles_m, tiles_n;
};
ConvTiles conv_tiles(ConvGemm g) { return {g.m, g.n, g.k, (g.m + kTile - 1) / kTile, (g.n + kTile - 1) / kTile}; }
TESSERA_DEVICE void tile_of(const ConvTiles& t, int64_t& g, int64_t& ti, int64_t& tj) {
  const int64_t per_group = t.tiles_m * t.tiles_n, blk = block_x();
  g = blk / per_group;
  ti = (blk % per_group) / t.tiles_n;
  tj = blk % t.tiles_n;
}

template <class T> TESSERA_GLOBAL void conv_fwd_kernel(ConvDims d, ConvTiles t, const T* x, const T* w, const T* bias, T* out) {
  using Acc = acc_t<T>;
  TESSERA_SHARED_ARRAY(Acc, as, kTile * kTile);
  TESSERA_SHARED_ARRAY(Acc, bs, kTile * kTile);
  int64_t g, ti, tj;
  tile_of(t, g, ti, tj);
  const int64_t og = d.o / d.groups;
  tiled_gemm<Acc>(
      t.m, t.n, t.k, ti, tj, [&](int64_t oo, int64_t q) { return static_cast<Acc>(w[(g * og + oo) * t.k + q]); },
      [&](int64_t q, int64_t col) { return im2col_at<Acc>(d, x, g, q, col); },
      [&](int64_t oo, int64_t col, Acc acc) {
        if (bias) acc += static_cast<Acc>(bias[g * og + oo]);
        out[fwd_out_offset(d, g, oo, col)] = static_cast<T>(acc);
      },
      as, bs);
}

template <class T> TESSERA_GLOBAL void conv_dgrad_kernel(ConvDims d, ConvTiles t, const T* gout, const T* w, T* gx) {
  using Acc = acc_t<T>;
  TESSERA_SHARED_ARRAY(Acc, as, kTile * kTile);
  TESSERA_SHARED_ARRAY(Acc, bs, kTile * kTile);
  int64_t g, ti, tj;
  tile_of(t, g, ti, tj);
  tiled_gemm<Acc>(
      t.m, t.n, t.k, ti, tj, [&](int64_t ci, int64_t q) { return dgrad_w_at<Acc>(d, w, g, ci, q); },
      [&](int64_t q, int64_t col) { return dgrad_gout_at<Acc>(d, gout, g, q, col); },
      [&](int64_t ci, int64_t col, Acc acc) { gx[dgrad_dx_offset(d, g, ci, col)] = static_cast<T>(acc); }, as, bs);
}

template <class T> TESSERA_GLOBAL void conv_wgrad_kernel(ConvDims d, ConvTiles t, const T* gout, const T* x, T* gw) {
  using Acc = acc_t<T>;
  TESSERA_SHARED_ARRAY(Acc, as, kTile * kTile);
  TESSERA_SHARED_ARRAY(Acc, bs, kTile * kTile);
  int64_t g, ti, tj;
  tile_of(t, g, ti, tj);
  const int64_t og = d.o / d.groups;
  tiled_gemm<Acc>(
      t.m, t.n, t.k, ti, tj, [&](int64_t oo, int64_t r) { return wgrad_gout_at<Acc>(d, gout, g, oo, r); },
      [&](int64_t r, int64_t q) { return im2col_at<Acc>(d, x, g, q, r); },
      [&](int64_t oo, int64_t q, Acc acc) { gw[(g * og + oo) * t.n + q] = static_cast<T>(acc); }, as, bs);
}

Grid conv_grid(const ConvTiles& t, int64_t groups) {
  const int64_t blocks = groups * t.tiles_m * t.tiles_n;
  TESSERA_CHECK(blocks < (int64_t{1} << 31), "conv2d", "problem too large for one launch");
  return Grid{static_cast<unsigned>(blocks)};
}

template <class F> void conv_dispatch(DType dt, const char* op, F&& f) {
  if (dt == DType::f32) f.template operator()<float>();
  else if (dt == DType::f64) f.template operator()<double>();
  else if (dt == DType::f16) f.template operator()<Half>();  // f16/bf16 operands, f32 accumulation
  else if (dt == DType::bf16) f.template operator()<BFloat16>();
  else throw Error(detail::concat(op, ": supports floating dtypes on the GPU backends, got ", dt));
}

void conv_fwd(const KernelCall& c) {
  Tensor& out = c.outputs[0];
  const ConvDims d = conv_dims(c.inputs[0].shape(), c.inputs[1].shape(), out.shape(), c.attrs);
  const ConvTiles t = conv_tiles(fwd_gemm(d));
  conv_dispatch(out.dtype(), "conv2d", [&]<class T>() {
    launch(conv_fwd_kernel<T>, conv_grid(t, d.groups), Grid{kTile * kTile}, 0, true, d, t, ptr<const T>(c.inputs[0]),
           ptr<const T>(c.inputs[1]), c.inputs[2].defined() ? ptr<const T>(c.inputs[2]) : nullptr, ptr<T>(out));
  });
}
void conv_dgrad(const KernelCall& c) {
  Tensor& gx = c.outputs[0];
  const ConvDims d = conv_dims(gx.shape(), c.inputs[1].shape(), c.inputs[0].shape(), c.attrs);
  const ConvTiles t = conv_tiles(dgrad_gemm(d));
  conv_dispatch(gx.dtype(), "conv2d_input_grad", [&]<class T>() {
    launch(conv_dgrad_kernel<T>, conv_grid(t, d.groups), Grid{kTile * kTile}, 0, true, d, t, ptr<const T>(c.inputs[0]),
           ptr<const T>(c.inputs[1]), ptr<T>(gx));
  });
}
void conv_wgrad(const KernelCall& c) {
  Tensor& gw = c.outputs[0];
  const ConvDims d = conv_dims(c.inputs[1].shape(), gw.shape(), c.inputs[0].shape(), c.attrs);
  const ConvTiles t = conv_tiles(wgrad_gemm(d));
  conv_dispatch(gw.dtype(), "conv2d_weight_grad", [&]<class T>() {
    launch(conv_wgrad_kernel<T>, conv_grid(t, d.groups), Grid{kTile * kTile}, 0, true, d, t, ptr<const T>(c.inputs[0]),
           ptr<const T>(c.inputs[1]), ptr<T>(gw));
  });
}

template <class T> TESSERA_GLOBAL void max_pool_kernel(PoolDims d, const T* x, T* y, int64_t* idx) {
  for (int64_t i = global_index(); i < d.planes * d.ho * d.wo; i += grid_stride()) max_pool_at<acc_t<T>>(d, x, i, y, idx);
}

// 2x2 windows at stride 2 without padding (the common CNN pool) with each window row read as
// one aligned pair: lanes then read consecutive 2-element vectors, every sector byte used,
// instead of two half-used requests. Same NaN and first-maximum rules as max_pool_at.
template <class T> struct alignas(2 * sizeof(T)) Pair {
  T v[2];
};
// One load of both elements as a single machine word (compilers may split a struct copy).
template <class T> TESSERA_DEVICE Pair<T> load_pair(const T* p) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 2);
  using Word = std::conditional_t<sizeof(T) == 4, uint64_t, uint32_t>;
  const Word w = *reinterpret_cast<const Word*>(p);
  Pair<T> r;
  memcpy(static_cast<void*>(&r), &w, sizeof r);
  return r;
}
template <class T> TESSERA_GLOBAL void max_pool_2x2_kernel(PoolDims d, const T* x, T* y, int64_t* idx) {
  if constexpr (sizeof(T) <= 4) {
  using Acc = acc_t<T>;
  for (int64_t i = global_index(); i < d.planes * d.ho * d.wo; i += grid_stride()) {
    const int64_t ow = i % d.wo, oh = (i / d.wo) % d.ho, p = i / (d.wo * d.ho);
    Acc best = 0;
    int64_t bi = -1;
    for (int64_t a = 0; a < 2; ++a) {
      const int64_t at = (p * d.h + 2 * oh + a) * d.w + 2 * ow;
      const Pair<T> pair = load_pair(x + at);
      for (int e = 0; e < 2; ++e) {
        const Acc v = static_cast<Acc>(pair.v[e]);
        if (bi < 0 || ((v > best || v != v) && best == best)) best = v, bi = (2 * oh + a) * d.w + 2 * ow + e;
      }
    }
    y[i] = static_cast<T>(best);
    if (idx) idx[i] = bi;
  }
  }
}
template <class T> TESSERA_GLOBAL void avg_pool_2x2_kernel(PoolDims d, const T* x, T* y) {
  if constexpr (sizeof(T) <= 4) {
  using Acc = acc_t<T>;
  for (int64_t i = global_index(); i < d.planes * d.ho * d.wo; i += grid_stride()) {
    const int64_t ow = i % d.wo, oh = (i / d.wo) % d.ho, p = i / (d.wo * d.ho);
    Acc s = 0;
    for (int64_t a = 0; a < 2; ++a) {
      const Pair<T> pair = load_pair(x + (p * d.h + 2 * oh + a) * d.w + 2 * ow);
      s += static_cast<Acc>(pair.v[0]);  // in avg_pool_at's order, so both paths round alike
      s += static_cast<Acc>(pair.v[1]);
    }
    y[i] = static_cast<T>(s / Acc(4));
  }
  }
}
// The pair path needs whole windows inside the input and pair-aligned rows.
template <class T> bool pairs_fit(const PoolDims& d, const Tensor& x) {
  if constexpr (sizeof(T) > 4) return false;
  return d.kh == 2 && d.kw == 2 && d.sh == 2 && d.sw == 2 && d.ph == 0 && d.pw == 0 && d.dh == 1 && d.dw == 1 && d.w % 2 == 0 &&
         2 * d.ho <= d.h && 2 * d.wo <= d.w && reinterpret_cast<uintptr_t>(x.data_ptr()) % (2 * sizeof(T)) == 0;
}

// Backward: a thread per input element gathers from the windows holding it (coalesced writes,
// no atomics, deterministic); was a thread per plane.
template <class T> TESSERA_GLOBAL void max_pool_bwd_kernel(PoolDims d, const T* gout, const int64_t* idx, T* gx) {
  for (int64_t i = global_index(); i < d.planes * d.h * d.w; i += grid_stride()) max_pool_bwd_at<acc_t<T>>(d, gout, idx, gx, i);
}
template <class T> TESSERA_GLOBAL void avg_pool_kernel(PoolDims d, const T* x, T* y) {
  for (int64_t i = global_index(); i < d.planes * d.ho * d.wo; i += grid_stride()) avg_pool_at<acc_t<T>>(d, x, i, y);
}
template <class T> TESSERA_GLOBAL void avg_pool_bwd_kernel(PoolDims d, const T* gout, T* gx) {
  for (int64_t i = global_index(); i < d.planes * d.h * d.w; i += grid_stride()) avg_pool_bwd_at<acc_t<T>>(d, gout, gx, i);
}

template <template <class> class K> void float_op(const KernelCall& c) {
  backend_common::dispatch_float(c.outputs[0].dtype(), op_name(c.op).data(), [&]<class T>() { K<T>{}(c); });
}
template <class T> struct MaxPoolF {
  void operator()(const KernelCall& c) {
    const PoolDims d = pool_dims(c.inputs[0].shape(), c.outputs[0].shape(), c.attrs);
    launch(pairs_fit<T>(d, c.inputs[0]) ? max_pool_2x2_kernel<T> : max_pool_kernel<T>, blocks_for(c.outputs[0].numel()), Grid{kThreads}, 0,
           false, d, ptr<const T>(c.inputs[0]), ptr<T>(c.outputs[0]), c.outputs[1].defined() ? ptr<int64_t>(c.outputs[1]) : nullptr);
  }
};
template <class T> struct MaxPoolB {
  void operator()(const KernelCall& c) {
    const PoolDims d = pool_dims(c.outputs[0].shape(), c.inputs[0].shape(), c.attrs);
    launch(max_pool_bwd_kernel<T>, blocks_for(c.outputs[0].numel()), Grid{kThreads}, 0, false, d, ptr<const T>(c.inputs[0]),
           ptr<const int64_t>(c.inputs[1]), ptr<T>(c.outputs[0]));
  }
};
template <class T> struct AvgPoolF {
  void operator()(const KernelCall& c) {
    const PoolDims d = pool_dims(c.inputs[0].shape(), c.outputs[0].shape(), c.attrs);
    launch(pairs_fit<T>(d, c.inputs[0]) ? avg_pool_2x2_kernel<T> : avg_pool_kernel<T>, blocks_for(c.outputs[0].numel()), Grid{kThreads}, 0,
           false, d, ptr<const T>(c.inputs[0]), ptr<T>(c.outputs[0]));
  }
};
template <class T> struct AvgPoolB {
  void operator()(const KernelCall& c) {
    const PoolDims d = pool_dims(c.outputs[0].shape(), c.inputs[0].shape(), c.attrs);
    launch(avg_pool_bwd_kernel<T>, blocks_for(c.outputs[0].numel()), Grid{kThreads}, 0, false, d, ptr<const T>(c.inputs[0]), ptr<T>(c.outputs[0]));
  }
};
}  // namespace

void register_norm_kernels(KernelTable& table);  // norm.cu
void register_attention_kernels(KernelTable& table);  // attention.cu

void register_nn(KernelTable& table) {
  table[OpId::Conv2d] = &conv_fwd;
  table[OpId::Conv2dInputGrad] = &conv_dgrad;
  table[OpId::Conv2dWeightGrad] = &conv_wgrad;
  table[OpId::MaxPool2d] = &float_op<MaxPoolF>;
  table[OpId::MaxPool2dBackward] = &float_op<MaxPoolB>;
  table[OpId::AvgPool2d] = &float_op<AvgPoolF>;
  table[OpId::AvgPool2dBackward] = &float_op<AvgPoolB>;
  register_norm_kernels(table);
  register_attention_kernels(table);
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
