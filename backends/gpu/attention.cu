// Fused scaled dot-product attention (FlashAttention-2 style) for CUDA, HIP and the emulator.
// Forward: a block of 128 threads per (batch-head, query tile); key/value tiles of 32 rows are
// staged in shared memory with coalesced loads; each warp owns query rows, one key per lane
// (warps are 32 or 64 wide, so every key of a tile has a lane), and reduces the row max and
// sum with butterfly shuffles; the output tile accumulates in shared memory with the threads
// along the head dim (conflict-free, the probabilities broadcast). Only the row log-sum-exp is
// written for backward. Backward recomputes the probabilities: a delta kernel (rowsum dO * O,
// a warp per row), a dK/dV kernel (a block per key tile walking the query tiles, lanes over
// queries) and a dQ kernel (a block per query tile walking the key tiles) - no atomics, so
// the gradients are deterministic. Shared-memory tiles are sized per head-dim bucket (32, 64,
// 128; f64 to 64) to stay under 48 KiB; rows padded by one element where lanes stride rows.
// Math in f32 for f32/f16/bf16 (f64 for f64). f16/bf16 on devices with matrix units run the
// *_mma_kernel variants (tensor cores / MFMA through mma.h, attention_mma.h), forward and backward.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "../common/attention_bias.h"
#include "common.h"
#include "kernels.h"
#include "mma_fragments.h"
#include "tc_gemm.h"
#include "tessera/kernels/attention.h"
#include "tessera/ops/creation.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {
namespace {

constexpr unsigned kAttnThreads = 128;
constexpr int kTile = 32;  // keys per forward tile, queries per dK/dV tile: one per lane

template <class C, int kD> constexpr int attn_rows() { return kD * sizeof(C) <= 256 ? 16 : (kD * sizeof(C) <= 512 ? 8 : 4); }

struct AttnArgs {
  int64_t bh, tq, tk, d, dv;
  double scale;
  bool causal;
  float keep;
  uint64_t seed, offset;
  kernels::AttentionBias bias;  // the additive mask, if any (compute dtype)
};

/** Calls f.template operator()<kMask>() with kMask = whether the call has a mask. */
template <class F>
void with_mask(const AttnArgs& a, F&& f) {
  if (a.bias.defined()) f.template operator()<true>();
  else f.template operator()<false>();
}

Grid tiles_grid(int64_t tiles) { return Grid{static_cast<unsigned>(tiles < 4096 ? (tiles > 0 ? tiles : 1) : 4096)}; }

template <class C> struct MaxOp { TESSERA_DEVICE C operator()(C a, C b) const { return a > b ? a : b; } };
template <class C> struct SumOp { TESSERA_DEVICE C operator()(C a, C b) const { return a + b; } };

template <class C> TESSERA_DEVICE C dropout_factor(const AttnArgs& a, int64_t row, int64_t j) {
  return a.keep < 1.0f ? static_cast<C>(kernels::attention_dropout_factor(a.seed, a.offset, row, j, a.tk, a.keep)) : C(1);
}

// rows x kD tile of src (row stride `width`, rows [r0, r0 + rows)) into dst (row stride `ld`),
// times `mul`; zeros outside the tensor.
template <class T, class C>
TESSERA_DEVICE void load_tile(const T* src, int64_t nrows, int64_t width, int64_t r0, int rows, int kd, C* dst, int ld, C mul) {
  for (int e = static_cast<int>(thread_x()); e < rows * kd; e += static_cast<int>(block_dim_x())) {
    const int r = e / kd, x = e % kd;
    dst[r * ld + x] = (r0 + r < nrows && x < width) ? static_cast<C>(src[(r0 + r) * width + x]) * mul : C(0);
  }
}

// kMask: the kernel reads a.bias (a separate instantiation, so the unmasked kernels keep their registers).
template <class T, int kD, bool kMask>
TESSERA_GLOBAL void attn_fwd_kernel(AttnArgs a, const T* q, const T* k, const T* v, T* o, compute_t<T>* lse) {
  using C = compute_t<T>;
  constexpr int kRows = attn_rows<C, kD>();
  TESSERA_SHARED_ARRAY(C, qs, kRows * kD);
  TESSERA_SHARED_ARRAY(C, acc, kRows * kD);
  TESSERA_SHARED_ARRAY(C, ps, kRows * kTile);
  TESSERA_SHARED_ARRAY(C, ks, kTile * (kD + 1));
  TESSERA_SHARED_ARRAY(C, vs, kTile * kD);
  TESSERA_SHARED_ARRAY(C, stat, 5 * kRows);  // m, l, m_new, alpha, tile sum
  C *m = stat, *l = stat + kRows, *m_new = stat + 2 * kRows, *alpha = stat + 3 * kRows, *tsum = stat + 4 * kRows;
  const int ws = warp_size(), lane = static_cast<int>(thread_x()) % ws, warp = static_cast<int>(thread_x()) / ws,
            nwarps = static_cast<int>(block_dim_x()) / ws;
  const int64_t qtiles = (a.tq + kRows - 1) / kRows;
  for (int64_t tile = block_x(); tile < a.bh * qtiles; tile += grid_dim_x()) {
    const int64_t bh = tile / qtiles, i0 = (tile % qtiles) * kRows;
    const C* mask = kMask ? a.bias.plane<C>(bh) : nullptr;
    load_tile(q + bh * a.tq * a.d, a.tq, a.d, i0, kRows, kD, qs, kD, static_cast<C>(a.scale));
    for (int e = static_cast<int>(thread_x()); e < kRows * kD; e += static_cast<int>(block_dim_x())) acc[e] = 0;
    if (thread_x() < static_cast<unsigned>(kRows)) m[thread_x()] = -INFINITY, l[thread_x()] = 0;
    // A tile with no keys (causal, tq > tk) goes straight to the epilogue, which reads l and m
    // across threads: their initial values must be visible (racecheck on an H200 found it).
    sync_threads();
    const int64_t last = i0 + kRows - 1 < a.tq ? i0 + kRows - 1 : a.tq - 1;
    const int64_t kend = kernels::attention_key_end(last, a.tq, a.tk, a.causal);
    for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
      load_tile(k + bh * a.tk * a.d, a.tk, a.d, j0, kTile, kD, ks, kD + 1, C(1));
      load_tile(v + bh * a.tk * a.dv, a.tk, a.dv, j0, kTile, kD, vs, kD, C(1));
      sync_threads();
      // Scores and the row statistics: warp w takes rows w, w + nwarps, ...; lane = key.
      for (int r = warp; r < kRows; r += nwarps) {
        const int64_t i = i0 + r, j = j0 + lane;
        const bool valid = lane < kTile && i < a.tq && j < kernels::attention_key_end(i, a.tq, a.tk, a.causal);
        C s = -INFINITY;
        if (valid) {
          s = 0;
          for (int x = 0; x < kD; ++x) s += qs[r * kD + x] * ks[lane * (kD + 1) + x];
          if constexpr (kMask) s += mask[i * a.bias.s_q + j * a.bias.s_k];
        }
        const C m_old = m[r];
        const C mx = warp_all_reduce(s, MaxOp<C>{});
        const C mn = m_old > mx ? m_old : mx;
        const C p = valid ? ::exp(s - kernels::attention_softmax_base(mn)) : C(0);
        const C sum = warp_all_reduce(p, SumOp<C>{});
        if (lane < kTile) ps[r * kTile + lane] = valid ? p * dropout_factor<C>(a, bh * a.tq + i, j) : C(0);
        if (lane == 0) {
          m_new[r] = mn;
          alpha[r] = m_old == -INFINITY ? C(0) : ::exp(m_old - mn);
          tsum[r] = sum;
        }
      }
      sync_threads();
      for (int e = static_cast<int>(thread_x()); e < kRows * kD; e += static_cast<int>(block_dim_x())) {
        const int r = e / kD, x = e % kD;
        C val = acc[e] * alpha[r];
        for (int jj = 0; jj < kTile; ++jj) val += ps[r * kTile + jj] * vs[jj * kD + x];
        acc[e] = val;
      }
      if (thread_x() < static_cast<unsigned>(kRows)) {
        const int r = static_cast<int>(thread_x());
        if (m_new[r] != -INFINITY) l[r] = l[r] * alpha[r] + tsum[r], m[r] = m_new[r];
      }
      sync_threads();
    }
    for (int e = static_cast<int>(thread_x()); e < kRows * kD; e += static_cast<int>(block_dim_x())) {
      const int r = e / kD, x = e % kD;
      if (i0 + r < a.tq && x < a.dv) o[(bh * a.tq + i0 + r) * a.dv + x] = static_cast<T>(l[r] > 0 ? acc[e] / l[r] : C(0));
    }
    if (thread_x() < static_cast<unsigned>(kRows) && i0 + thread_x() < a.tq) {
      const int r = static_cast<int>(thread_x());
      lse[bh * a.tq + i0 + r] = l[r] > 0 ? m[r] + ::log(l[r]) : C(-INFINITY);
    }
    sync_threads();
  }
}

#include "attention_mma.h"  // the f16/bf16 kernels on the matrix units

// delta[row] = sum_x dO[row, x] * O[row, x]; a warp per row.
template <class T> TESSERA_GLOBAL void attn_delta_kernel(int64_t rows, int64_t dv, const T* go, const T* o, compute_t<T>* delta) {
  using C = compute_t<T>;
  const int ws = warp_size(), lane = static_cast<int>(thread_x()) % ws;
  for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
    C s = 0;
    for (int64_t x = lane; x < dv; x += ws) s += static_cast<C>(go[r * dv + x]) * static_cast<C>(o[r * dv + x]);
    s = warp_all_reduce(s, SumOp<C>{});
    if (lane == 0) delta[r] = s;
  }
}

// dK, dV for a tile of kRows keys: walks the query tiles (32 queries, one per lane).
template <class T, int kD, bool kMask>
TESSERA_GLOBAL void attn_dkdv_kernel(AttnArgs a, const T* go, const T* q, const T* k, const T* v, const compute_t<T>* lse,
                                     const compute_t<T>* delta, T* dk, T* dv) {
  using C = compute_t<T>;
  constexpr int kKeys = attn_rows<C, kD>();
  TESSERA_SHARED_ARRAY(C, qs, kTile * (kD + 1));
  TESSERA_SHARED_ARRAY(C, dos, kTile * (kD + 1));
  TESSERA_SHARED_ARRAY(C, dka, kKeys * kD);
  TESSERA_SHARED_ARRAY(C, dva, kKeys * kD);
  TESSERA_SHARED_ARRAY(C, pz, kKeys * kTile);
  TESSERA_SHARED_ARRAY(C, dss, kKeys * kTile);
  const int ws = warp_size(), lane = static_cast<int>(thread_x()) % ws, warp = static_cast<int>(thread_x()) / ws,
            nwarps = static_cast<int>(block_dim_x()) / ws;
  const int64_t ktiles = (a.tk + kKeys - 1) / kKeys;
  for (int64_t tile = block_x(); tile < a.bh * ktiles; tile += grid_dim_x()) {
    const int64_t bh = tile / ktiles, j0 = (tile % ktiles) * kKeys;
    const C* mask = kMask ? a.bias.plane<C>(bh) : nullptr;
    for (int e = static_cast<int>(thread_x()); e < kKeys * kD; e += static_cast<int>(block_dim_x())) dka[e] = 0, dva[e] = 0;
    // The first query that sees key j0 (causal): i >= j0 - (tk - tq).
    int64_t first = a.causal ? j0 - (a.tk - a.tq) : 0;
    first = first < 0 ? 0 : first / kTile * kTile;
    for (int64_t i0 = first; i0 < a.tq; i0 += kTile) {
      load_tile(q + bh * a.tq * a.d, a.tq, a.d, i0, kTile, kD, qs, kD + 1, static_cast<C>(a.scale));
      load_tile(go + bh * a.tq * a.dv, a.tq, a.dv, i0, kTile, kD, dos, kD + 1, C(1));
      sync_threads();
      for (int r = warp; r < kKeys; r += nwarps) {
        const int64_t j = j0 + r, i = i0 + lane;
        C p = 0, ds = 0;
        if (lane < kTile && i < a.tq && j < a.tk && j < kernels::attention_key_end(i, a.tq, a.tk, a.causal)) {
          const int64_t row = bh * a.tq + i;
          const C lse_i = lse[row];
          if (lse_i != -INFINITY) {
            const T* kr = k + (bh * a.tk + j) * a.d;
            const T* vr = v + (bh * a.tk + j) * a.dv;
            C s = 0, dp = 0;
            for (int64_t x = 0; x < a.d; ++x) s += qs[lane * (kD + 1) + x] * static_cast<C>(kr[x]);
            for (int64_t x = 0; x < a.dv; ++x) dp += dos[lane * (kD + 1) + x] * static_cast<C>(vr[x]);
            if constexpr (kMask) s += mask[i * a.bias.s_q + j * a.bias.s_k];
            const C z = dropout_factor<C>(a, row, j);
            p = ::exp(s - lse_i);
            ds = p * (dp * z - delta[row]);
            p *= z;
          }
        }
        if (lane < kTile) pz[r * kTile + lane] = p, dss[r * kTile + lane] = ds;
      }
      sync_threads();
      for (int e = static_cast<int>(thread_x()); e < kKeys * kD; e += static_cast<int>(block_dim_x())) {
        const int r = e / kD, x = e % kD;
        C sv = dva[e], sk = dka[e];
        for (int ii = 0; ii < kTile; ++ii) {
          sv += pz[r * kTile + ii] * dos[ii * (kD + 1) + x];
          sk += dss[r * kTile + ii] * qs[ii * (kD + 1) + x];  // qs carries the scale
        }
        dva[e] = sv, dka[e] = sk;
      }
      sync_threads();
    }
    for (int e = static_cast<int>(thread_x()); e < kKeys * kD; e += static_cast<int>(block_dim_x())) {
      const int r = e / kD, x = e % kD;
      if (j0 + r < a.tk) {
        if (x < a.d) dk[(bh * a.tk + j0 + r) * a.d + x] = static_cast<T>(dka[e]);
        if (x < a.dv) dv[(bh * a.tk + j0 + r) * a.dv + x] = static_cast<T>(dva[e]);
      }
    }
    sync_threads();
  }
}

// dQ for a tile of kRows queries: walks the key tiles (32 keys, one per lane).
template <class T, int kD, bool kMask>
TESSERA_GLOBAL void attn_dq_kernel(AttnArgs a, const T* go, const T* q, const T* k, const T* v, const compute_t<T>* lse,
                                   const compute_t<T>* delta, T* dq) {
  using C = compute_t<T>;
  constexpr int kRows = attn_rows<C, kD>();
  TESSERA_SHARED_ARRAY(C, qs, kRows * kD);
  TESSERA_SHARED_ARRAY(C, dos, kRows * kD);
  TESSERA_SHARED_ARRAY(C, ks, kTile * (kD + 1));
  TESSERA_SHARED_ARRAY(C, vs, kTile * (kD + 1));
  TESSERA_SHARED_ARRAY(C, dqa, kRows * kD);
  TESSERA_SHARED_ARRAY(C, dss, kRows * kTile);
  const int ws = warp_size(), lane = static_cast<int>(thread_x()) % ws, warp = static_cast<int>(thread_x()) / ws,
            nwarps = static_cast<int>(block_dim_x()) / ws;
  const int64_t qtiles = (a.tq + kRows - 1) / kRows;
  for (int64_t tile = block_x(); tile < a.bh * qtiles; tile += grid_dim_x()) {
    const int64_t bh = tile / qtiles, i0 = (tile % qtiles) * kRows;
    const C* mask = kMask ? a.bias.plane<C>(bh) : nullptr;
    load_tile(q + bh * a.tq * a.d, a.tq, a.d, i0, kRows, kD, qs, kD, static_cast<C>(a.scale));
    load_tile(go + bh * a.tq * a.dv, a.tq, a.dv, i0, kRows, kD, dos, kD, C(1));
    for (int e = static_cast<int>(thread_x()); e < kRows * kD; e += static_cast<int>(block_dim_x())) dqa[e] = 0;
    const int64_t last = i0 + kRows - 1 < a.tq ? i0 + kRows - 1 : a.tq - 1;
    const int64_t kend = kernels::attention_key_end(last, a.tq, a.tk, a.causal);
    for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
      load_tile(k + bh * a.tk * a.d, a.tk, a.d, j0, kTile, kD, ks, kD + 1, C(1));
      load_tile(v + bh * a.tk * a.dv, a.tk, a.dv, j0, kTile, kD, vs, kD + 1, C(1));
      sync_threads();
      for (int r = warp; r < kRows; r += nwarps) {
        const int64_t i = i0 + r, j = j0 + lane;
        C ds = 0;
        if (lane < kTile && i < a.tq && j < kernels::attention_key_end(i, a.tq, a.tk, a.causal)) {
          const int64_t row = bh * a.tq + i;
          const C lse_i = lse[row];
          if (lse_i != -INFINITY) {
            C s = 0, dp = 0;
            for (int x = 0; x < kD; ++x) {
              s += qs[r * kD + x] * ks[lane * (kD + 1) + x];
              dp += dos[r * kD + x] * vs[lane * (kD + 1) + x];
            }
            if constexpr (kMask) s += mask[i * a.bias.s_q + j * a.bias.s_k];
            const C p = ::exp(s - lse_i);
            ds = p * (dp * dropout_factor<C>(a, row, j) - delta[row]);
          }
        }
        if (lane < kTile) dss[r * kTile + lane] = ds;
      }
      sync_threads();
      for (int e = static_cast<int>(thread_x()); e < kRows * kD; e += static_cast<int>(block_dim_x())) {
        const int r = e / kD, x = e % kD;
        C sq = dqa[e];
        for (int jj = 0; jj < kTile; ++jj) sq += dss[r * kTile + jj] * ks[jj * (kD + 1) + x];
        dqa[e] = sq;
      }
      sync_threads();
    }
    for (int e = static_cast<int>(thread_x()); e < kRows * kD; e += static_cast<int>(block_dim_x())) {
      const int r = e / kD, x = e % kD;
      if (i0 + r < a.tq && x < a.d) dq[(bh * a.tq + i0 + r) * a.d + x] = static_cast<T>(dqa[e] * static_cast<C>(a.scale));
    }
    sync_threads();
  }
}

// `mask_at`: the index of the optional mask among the call's inputs.
AttnArgs attn_args(const KernelCall& c, const Tensor& q, const Tensor& k, const Tensor& v, size_t mask_at) {
  return {q.size(0),
          q.size(1),
          k.size(1),
          q.size(2),
          v.size(2),
          c.attrs.scale,
          c.attrs.causal,
          static_cast<float>(1.0 - c.attrs.dropout_p),
          c.attrs.seed,
          c.attrs.offset,
          backend_common::attention_bias(c.inputs, mask_at)};
}

// Calls f.template operator()<T, kD>() for the smallest head-dim bucket holding d and dv.
template <class F> void with_bucket(const KernelCall& c, DType dt, int64_t d, int64_t dv, F&& f) {
  const int64_t need = d > dv ? d : dv, cap = dt == DType::f64 ? 64 : 128;
  if (need > cap) {
    throw NotImplemented(detail::concat(op_name(c.op), ": head dim ", need, " is above the GPU kernels' ", cap, " for ", dtype_name(dt),
                                        " (their tiles must fit 48 KiB of shared memory)"));
  }
  backend_common::dispatch_float(dt, op_name(c.op).data(), [&]<class T>() {
    if (need <= 32) f.template operator()<T, 32>();
    else if (need <= 64) f.template operator()<T, 64>();
    else if constexpr (sizeof(compute_t<T>) == 4) f.template operator()<T, 128>();
  });
}

void attention_fwd(const KernelCall& c) {
  const Tensor &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  const AttnArgs a = attn_args(c, q, k, v, 3);
  with_bucket(c, q.dtype(), a.d, a.dv, [&]<class T, int kD>() {
    using C = compute_t<T>;
    if (attention_fwd_mma<T, kD>(a, ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<T>(c.outputs[0]), ptr<C>(c.outputs[1]),
                                 q.device())) {
      return;
    }
    const int64_t tiles = a.bh * ((a.tq + attn_rows<C, kD>() - 1) / attn_rows<C, kD>());
    with_mask(a, [&]<bool kMask>() {
      launch(attn_fwd_kernel<T, kD, kMask>, tiles_grid(tiles), Grid{kAttnThreads}, 0, true, a, ptr<const T>(q), ptr<const T>(k),
             ptr<const T>(v), ptr<T>(c.outputs[0]), ptr<C>(c.outputs[1]));
    });
  });
}

void attention_bwd(const KernelCall& c) {
  const Tensor &go = c.inputs[0], &q = c.inputs[1], &k = c.inputs[2], &v = c.inputs[3], &o = c.inputs[4], &lse = c.inputs[5];
  const AttnArgs a = attn_args(c, q, k, v, 6);
  const Tensor delta = empty({a.bh * a.tq}, lse.dtype(), lse.device());
  with_bucket(c, q.dtype(), a.d, a.dv, [&]<class T, int kD>() {
    using C = compute_t<T>;
    constexpr int kRows = attn_rows<C, kD>();
    launch(attn_delta_kernel<T>, warp_row_blocks(a.bh * a.tq), Grid{kThreads}, 0, true, a.bh * a.tq, a.dv, ptr<const T>(go),
           ptr<const T>(o), ptr<C>(delta));
    if (attention_bwd_mma<T, kD>(a, ptr<const T>(go), ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const C>(lse),
                                 ptr<const C>(delta), ptr<T>(c.outputs[0]), ptr<T>(c.outputs[1]), ptr<T>(c.outputs[2]), q.device())) {
      return;
    }
    with_mask(a, [&]<bool kMask>() {
      launch(attn_dkdv_kernel<T, kD, kMask>, tiles_grid(a.bh * ((a.tk + kRows - 1) / kRows)), Grid{kAttnThreads}, 0, true, a,
             ptr<const T>(go), ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const C>(lse), ptr<const C>(delta),
             ptr<T>(c.outputs[1]), ptr<T>(c.outputs[2]));
      launch(attn_dq_kernel<T, kD, kMask>, tiles_grid(a.bh * ((a.tq + kRows - 1) / kRows)), Grid{kAttnThreads}, 0, true, a,
             ptr<const T>(go), ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const C>(lse), ptr<const C>(delta),
             ptr<T>(c.outputs[0]));
    });
  });
}
}  // namespace

void register_attention_kernels(KernelTable& table) {
  table[OpId::Attention] = &attention_fwd;
  table[OpId::AttentionBackward] = &attention_bwd;
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
