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
// *_mma_kernel variants (tensor cores / MFMA through mma.h), forward and backward.
#include <cmath>
#include <type_traits>

#include "common.h"
#include "kernels.h"
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
};

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

template <class T, int kD> TESSERA_GLOBAL void attn_fwd_kernel(AttnArgs a, const T* q, const T* k, const T* v, T* o, compute_t<T>* lse) {
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
        }
        const C m_old = m[r];
        const C mx = warp_all_reduce(s, MaxOp<C>{});
        const C mn = m_old > mx ? m_old : mx;
        const C p = valid ? ::exp(s - mn) : C(0);
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

// rows x kD tile of 16-bit src (row stride `width`, rows [r0, r0 + rows)) into dst (row stride
// ld) as raw bits, zeros outside the tensor: the MMA kernels' shared-memory operands.
template <class T, int kD>
TESSERA_DEVICE void stage_bits(const T* src, int64_t nrows, int64_t width, int64_t r0, int rows, uint16_t* dst, int ld) {
  for (int e = static_cast<int>(thread_x()); e < rows * kD; e += static_cast<int>(block_dim_x())) {
    const int r = e / kD, x = e % kD;
    dst[r * ld + x] = (r0 + r < nrows && x < width) ? src[(r0 + r) * width + x].bits : uint16_t{0};
  }
}

// f16/bf16 forward on the matrix units (mma.h): 4 warps, 16 query rows each (one MMA tile
// tall), Q held in A fragments for the whole key walk. Per key tile of 32: S = Q K^T by MMA,
// staged in shared memory as f32; the row statistics as in the SIMT kernel (a lane per key,
// butterfly max and sum); P rounded to T (as FlashAttention-2 does); O = alpha O + P V by MMA
// into the warps' f32 accumulator fragments. The same source runs mma.sync (32-lane warps),
// MFMA (64-lane wavefronts) and, on the emulator, the fragment-exact reference of both.
template <class Shape, class T, int kD>
TESSERA_GLOBAL void attn_fwd_mma_kernel(AttnArgs a, const T* q, const T* k, const T* v, T* o, float* lse) {
  constexpr int kRows = 4 * Shape::M;                 // queries per block
  constexpr int kLd = kD + 8, kLdP = kTile + 8;       // 16-bit row strides (bank skew)
  constexpr int FS = kTile / Shape::N, FD = kD / Shape::N, KD = kD / Shape::K, KT = kTile / Shape::K;
  // Raw 16-bit storage: Half/BFloat16 have default member initialisers, which __shared__ forbids.
  TESSERA_SHARED_ARRAY(uint16_t, qs, kRows * kD);
  TESSERA_SHARED_ARRAY(uint16_t, ks, kTile * kLd);
  TESSERA_SHARED_ARRAY(uint16_t, vs, kTile * kLd);
  TESSERA_SHARED_ARRAY(uint16_t, ps, kRows * kLdP);
  TESSERA_SHARED_ARRAY(float, ss, kRows * (kTile + 1));
  TESSERA_SHARED_ARRAY(float, stat, 3 * kRows);  // m, l, alpha
  float *m = stat, *l = stat + kRows, *alpha = stat + 2 * kRows;
  const int tid = static_cast<int>(thread_x()), warp = tid / Shape::Warp, ln = lane(), w0 = warp * Shape::M;
  const int64_t qtiles = (a.tq + kRows - 1) / kRows;
  for (int64_t tile = block_x(); tile < a.bh * qtiles; tile += grid_dim_x()) {
    const int64_t bh = tile / qtiles, i0 = (tile % qtiles) * kRows;
    stage_bits<T, kD>(q + bh * a.tq * a.d, a.tq, a.d, i0, kRows, qs, kD);
    if (tid < kRows) m[tid] = -INFINITY, l[tid] = 0;
    sync_threads();
    T qf[KD][Shape::A];
    for (int kk = 0; kk < KD; ++kk)
      for (int e = 0; e < Shape::A; ++e) qf[kk][e] = T::from_bits(qs[(w0 + Shape::a_row(ln, e)) * kD + kk * Shape::K + Shape::a_col(ln, e)]);
    float of[FD][Shape::C];
    for (int f = 0; f < FD; ++f)
      for (int e = 0; e < Shape::C; ++e) of[f][e] = 0.0f;
    const int64_t last = i0 + kRows - 1 < a.tq ? i0 + kRows - 1 : a.tq - 1;
    const int64_t kend = kernels::attention_key_end(last, a.tq, a.tk, a.causal);
    for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
      stage_bits<T, kD>(k + bh * a.tk * a.d, a.tk, a.d, j0, kTile, ks, kLd);
      stage_bits<T, kD>(v + bh * a.tk * a.dv, a.tk, a.dv, j0, kTile, vs, kLd);
      sync_threads();
      for (int f = 0; f < FS; ++f) {  // S = Q K^T: B[x][j] = K[j][x]
        float sf[Shape::C] = {};
        for (int kk = 0; kk < KD; ++kk) {
          T kf[Shape::B];
          for (int e = 0; e < Shape::B; ++e)
            kf[e] = T::from_bits(ks[(f * Shape::N + Shape::b_col(ln, e)) * kLd + kk * Shape::K + Shape::b_row(ln, e)]);
          mma<Shape, T>(sf, qf[kk], kf);
        }
        for (int e = 0; e < Shape::C; ++e) ss[(w0 + Shape::c_row(ln, e)) * (kTile + 1) + f * Shape::N + Shape::c_col(ln, e)] = sf[e];
      }
      sync_threads();
      for (int r = 0; r < Shape::M; ++r) {  // the warp's rows: a lane per key
        const int row = w0 + r;
        const int64_t i = i0 + row, j = j0 + ln;
        const bool valid = ln < kTile && i < a.tq && j < kernels::attention_key_end(i, a.tq, a.tk, a.causal);
        const float s = valid ? ss[row * (kTile + 1) + ln] * static_cast<float>(a.scale) : -INFINITY;
        const float m_old = m[row];
        const float mx = warp_all_reduce(s, MaxOp<float>{});
        const float mn = m_old > mx ? m_old : mx;
        const float p = valid ? ::expf(s - mn) : 0.0f;
        const float sum = warp_all_reduce(p, SumOp<float>{});
        if (ln < kTile) ps[row * kLdP + ln] = static_cast<T>(valid ? p * dropout_factor<float>(a, bh * a.tq + i, j) : 0.0f).bits;
        sync_warp();  // every lane read m[row] before lane 0 rewrites it (a shuffle orders no memory)
        if (ln == 0) {
          alpha[row] = m_old == -INFINITY ? 0.0f : ::expf(m_old - mn);
          if (mn != -INFINITY) l[row] = l[row] * alpha[row] + sum, m[row] = mn;
        }
      }
      sync_threads();
      for (int f = 0; f < FD; ++f)
        for (int e = 0; e < Shape::C; ++e) of[f][e] *= alpha[w0 + Shape::c_row(ln, e)];
      for (int kk = 0; kk < KT; ++kk) {  // O += P V
        T pf[Shape::A];
        for (int e = 0; e < Shape::A; ++e) pf[e] = T::from_bits(ps[(w0 + Shape::a_row(ln, e)) * kLdP + kk * Shape::K + Shape::a_col(ln, e)]);
        for (int f = 0; f < FD; ++f) {
          T vf[Shape::B];
          for (int e = 0; e < Shape::B; ++e)
            vf[e] = T::from_bits(vs[(kk * Shape::K + Shape::b_row(ln, e)) * kLd + f * Shape::N + Shape::b_col(ln, e)]);
          mma<Shape, T>(of[f], pf, vf);
        }
      }
      sync_threads();  // before the next tile overwrites ks, vs and ps
    }
    for (int f = 0; f < FD; ++f) {
      for (int e = 0; e < Shape::C; ++e) {
        const int row = w0 + Shape::c_row(ln, e), x = f * Shape::N + Shape::c_col(ln, e);
        if (i0 + row < a.tq && x < a.dv) o[(bh * a.tq + i0 + row) * a.dv + x] = static_cast<T>(l[row] > 0 ? of[f][e] / l[row] : 0.0f);
      }
    }
    if (tid < kRows && i0 + tid < a.tq) lse[bh * a.tq + i0 + tid] = l[tid] > 0 ? m[tid] + ::logf(l[tid]) : -INFINITY;
    sync_threads();
  }
}

// f16/bf16 backward on the matrix units, the same warp layout as the forward (16 rows per warp,
// 4 warps). dK/dV: a block per 64 keys walks the query tiles of 32; per warp S^T = K Q^T and
// dP^T = V dO^T by MMA, P and dS computed on the accumulator fragments (each lane knows the row
// and column of its elements), rounded to T and staged in shared memory, then dV += P^T dO and
// dK += dS^T Q by MMA. dQ: a block per 64 queries walks the key tiles of 32 the same way with
// S = Q K^T, dP = dO V^T and dQ += dS K. No atomics: deterministic, like the SIMT kernels.
// kParts: which gradients this launch makes (1 dV, 2 dK, 3 both). At head dim 128 one launch
// holding K, V, dK and dV fragments needs ~256 live values per thread (a 528 B stack frame on
// sm_90), so there dV and dK are two launches that each recompute S (and dK also dP).
enum : int { kMakeDv = 1, kMakeDk = 2 };
template <class Shape, class T, int kD, int kParts>
TESSERA_GLOBAL void attn_dkdv_mma_kernel(AttnArgs a, const T* go, const T* q, const T* k, const T* v, const float* lse, const float* delta,
                                         T* dk, T* dv) {
  constexpr bool kDv = (kParts & kMakeDv) != 0, kDk = (kParts & kMakeDk) != 0;
  constexpr bool kVShared = kDk && !kDv;  // the dK-only launch reads this warp's V rows from shared memory
  constexpr int kKeys = 4 * Shape::M, kLd = kD + 8, kLdP = kTile + 8;
  constexpr int FQ = kTile / Shape::N, FD = kD / Shape::N, KD = kD / Shape::K, KQ = kTile / Shape::K;
  TESSERA_SHARED_ARRAY(uint16_t, qs, kTile * kLd);
  TESSERA_SHARED_ARRAY(uint16_t, dos, kTile * kLd);
  TESSERA_SHARED_ARRAY(uint16_t, pz, kKeys * kLdP);
  TESSERA_SHARED_ARRAY(uint16_t, dss, kKeys * kLdP);
  TESSERA_SHARED_ARRAY(float, rows, 2 * kTile);  // lse, delta of the query tile
  TESSERA_SHARED_ARRAY(uint16_t, vsh, kVShared ? kKeys * kLd : 1);
  const int tid = static_cast<int>(thread_x()), warp = tid / Shape::Warp, ln = lane(), w0 = warp * Shape::M;
  const float scale = static_cast<float>(a.scale);
  const int64_t ktiles = (a.tk + kKeys - 1) / kKeys;
  for (int64_t tile = block_x(); tile < a.bh * ktiles; tile += grid_dim_x()) {
    const int64_t bh = tile / ktiles, j0 = (tile % ktiles) * kKeys;
    // This warp's 16 keys and values as A fragments (row = key), straight from global memory
    // (the values only where dP is needed: for dK).
    T kf[KD][Shape::A], vf[kDk && !kVShared ? KD : 1][Shape::A];
    for (int kk = 0; kk < KD; ++kk) {
      for (int e = 0; e < Shape::A; ++e) {
        const int64_t j = j0 + w0 + Shape::a_row(ln, e);
        const int x = kk * Shape::K + Shape::a_col(ln, e);
        kf[kk][e] = j < a.tk && x < a.d ? k[(bh * a.tk + j) * a.d + x] : T(0.0f);
        if constexpr (kDk && !kVShared) vf[kk][e] = j < a.tk && x < a.dv ? v[(bh * a.tk + j) * a.dv + x] : T(0.0f);
      }
    }
    if constexpr (kVShared) {
      sync_threads();  // the previous tile's reads of vsh are done
      stage_bits<T, kD>(v + bh * a.tk * a.dv, a.tk, a.dv, j0, kKeys, vsh, kLd);  // read after the query loop's first barrier
    }
    float dkf[kDk ? FD : 1][Shape::C], dvf[kDv ? FD : 1][Shape::C];
    for (int f = 0; f < FD; ++f) {
      for (int e = 0; e < Shape::C; ++e) {
        if constexpr (kDk) dkf[f][e] = 0.0f;
        if constexpr (kDv) dvf[f][e] = 0.0f;
      }
    }
    int64_t first = a.causal ? j0 - (a.tk - a.tq) : 0;
    first = first < 0 ? 0 : first / kTile * kTile;
    for (int64_t i0 = first; i0 < a.tq; i0 += kTile) {
      stage_bits<T, kD>(q + bh * a.tq * a.d, a.tq, a.d, i0, kTile, qs, kLd);
      stage_bits<T, kD>(go + bh * a.tq * a.dv, a.tq, a.dv, i0, kTile, dos, kLd);
      if (tid < kTile) {
        const bool in = i0 + tid < a.tq;
        rows[tid] = in ? lse[bh * a.tq + i0 + tid] : -INFINITY;
        rows[kTile + tid] = in ? delta[bh * a.tq + i0 + tid] : 0.0f;
      }
      sync_threads();
      for (int f = 0; f < FQ; ++f) {  // S^T = K Q^T and dP^T = V dO^T: B[x][i] = Q[i][x], dO[i][x]
        float sf[Shape::C] = {}, pf[Shape::C] = {};
        for (int kk = 0; kk < KD; ++kk) {
          T qb[Shape::B], ob[Shape::B];
          for (int e = 0; e < Shape::B; ++e) {
            const int at = (f * Shape::N + Shape::b_col(ln, e)) * kLd + kk * Shape::K + Shape::b_row(ln, e);
            qb[e] = T::from_bits(qs[at]);
            if constexpr (kDk) ob[e] = T::from_bits(dos[at]);
          }
          mma<Shape, T>(sf, kf[kk], qb);
          if constexpr (kVShared) {
            T va[Shape::A];
            for (int e = 0; e < Shape::A; ++e) va[e] = T::from_bits(vsh[(w0 + Shape::a_row(ln, e)) * kLd + kk * Shape::K + Shape::a_col(ln, e)]);
            mma<Shape, T>(pf, va, ob);
          } else if constexpr (kDk) {
            mma<Shape, T>(pf, vf[kk], ob);
          }
        }
        for (int e = 0; e < Shape::C; ++e) {
          const int r = w0 + Shape::c_row(ln, e), ci = f * Shape::N + Shape::c_col(ln, e);
          const int64_t j = j0 + r, i = i0 + ci;
          float p = 0.0f, ds = 0.0f;
          if (i < a.tq && j < a.tk && j < kernels::attention_key_end(i, a.tq, a.tk, a.causal) && rows[ci] != -INFINITY) {
            const float z = dropout_factor<float>(a, bh * a.tq + i, j);
            p = ::expf(sf[e] * scale - rows[ci]);
            ds = p * (pf[e] * z - rows[kTile + ci]);
            p *= z;
          }
          if constexpr (kDv) pz[r * kLdP + ci] = static_cast<T>(p).bits;
          if constexpr (kDk) dss[r * kLdP + ci] = static_cast<T>(ds).bits;
        }
      }
      sync_threads();
      for (int kk = 0; kk < KQ; ++kk) {  // dV += P^T dO, dK += dS^T Q (the scale at the end)
        T pa[Shape::A], sa[Shape::A];
        for (int e = 0; e < Shape::A; ++e) {
          const int at = (w0 + Shape::a_row(ln, e)) * kLdP + kk * Shape::K + Shape::a_col(ln, e);
          if constexpr (kDv) pa[e] = T::from_bits(pz[at]);
          if constexpr (kDk) sa[e] = T::from_bits(dss[at]);
        }
        for (int f = 0; f < FD; ++f) {
          T ob[Shape::B], qb[Shape::B];
          for (int e = 0; e < Shape::B; ++e) {
            const int at = (kk * Shape::K + Shape::b_row(ln, e)) * kLd + f * Shape::N + Shape::b_col(ln, e);
            if constexpr (kDv) ob[e] = T::from_bits(dos[at]);
            if constexpr (kDk) qb[e] = T::from_bits(qs[at]);
          }
          if constexpr (kDv) mma<Shape, T>(dvf[f], pa, ob);
          if constexpr (kDk) mma<Shape, T>(dkf[f], sa, qb);
        }
      }
      sync_threads();  // before the next query tile overwrites the shared tiles
    }
    for (int f = 0; f < FD; ++f) {
      for (int e = 0; e < Shape::C; ++e) {
        const int64_t j = j0 + w0 + Shape::c_row(ln, e);
        const int x = f * Shape::N + Shape::c_col(ln, e);
        if (j >= a.tk) continue;
        if constexpr (kDk) {
          if (x < a.d) dk[(bh * a.tk + j) * a.d + x] = static_cast<T>(dkf[f][e] * scale);
        }
        if constexpr (kDv) {
          if (x < a.dv) dv[(bh * a.tk + j) * a.dv + x] = static_cast<T>(dvf[f][e]);
        }
      }
    }
  }
}

template <class Shape, class T, int kD>
TESSERA_GLOBAL void attn_dq_mma_kernel(AttnArgs a, const T* go, const T* q, const T* k, const T* v, const float* lse, const float* delta,
                                       T* dq) {
  constexpr int kRows = 4 * Shape::M, kLd = kD + 8, kLdP = kTile + 8;
  constexpr int FS = kTile / Shape::N, FD = kD / Shape::N, KD = kD / Shape::K, KT = kTile / Shape::K;
  TESSERA_SHARED_ARRAY(uint16_t, ks, kTile * kLd);
  TESSERA_SHARED_ARRAY(uint16_t, vs, kTile * kLd);
  TESSERA_SHARED_ARRAY(uint16_t, dss, kRows * kLdP);
  // The block's output-gradient rows stay in shared memory, read as A fragments where used:
  // held in registers beside Q and dQ they pushed the head-dim-128 kernel into spills on sm_90.
  TESSERA_SHARED_ARRAY(uint16_t, os, kRows * kLd);
  const int tid = static_cast<int>(thread_x()), warp = tid / Shape::Warp, ln = lane(), w0 = warp * Shape::M;
  const float scale = static_cast<float>(a.scale);
  const int64_t qtiles = (a.tq + kRows - 1) / kRows;
  for (int64_t tile = block_x(); tile < a.bh * qtiles; tile += grid_dim_x()) {
    const int64_t bh = tile / qtiles, i0 = (tile % qtiles) * kRows;
    T qf[KD][Shape::A];  // this warp's queries (row = query)
    for (int kk = 0; kk < KD; ++kk) {
      for (int e = 0; e < Shape::A; ++e) {
        const int64_t i = i0 + w0 + Shape::a_row(ln, e);
        const int x = kk * Shape::K + Shape::a_col(ln, e);
        qf[kk][e] = i < a.tq && x < a.d ? q[(bh * a.tq + i) * a.d + x] : T(0.0f);
      }
    }
    sync_threads();  // the previous tile's last reads of os are done
    stage_bits<T, kD>(go + bh * a.tq * a.dv, a.tq, a.dv, i0, kRows, os, kLd);  // read after the key loop's first barrier
    float dqf[FD][Shape::C];
    for (int f = 0; f < FD; ++f)
      for (int e = 0; e < Shape::C; ++e) dqf[f][e] = 0.0f;
    const int64_t last = i0 + kRows - 1 < a.tq ? i0 + kRows - 1 : a.tq - 1;
    const int64_t kend = kernels::attention_key_end(last, a.tq, a.tk, a.causal);
    for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
      stage_bits<T, kD>(k + bh * a.tk * a.d, a.tk, a.d, j0, kTile, ks, kLd);
      stage_bits<T, kD>(v + bh * a.tk * a.dv, a.tk, a.dv, j0, kTile, vs, kLd);
      sync_threads();
      for (int f = 0; f < FS; ++f) {  // S = Q K^T, dP = dO V^T
        float sf[Shape::C] = {}, pf[Shape::C] = {};
        for (int kk = 0; kk < KD; ++kk) {
          T kb[Shape::B], vb[Shape::B];
          for (int e = 0; e < Shape::B; ++e) {
            const int at = (f * Shape::N + Shape::b_col(ln, e)) * kLd + kk * Shape::K + Shape::b_row(ln, e);
            kb[e] = T::from_bits(ks[at]), vb[e] = T::from_bits(vs[at]);
          }
          T oa[Shape::A];
          for (int e = 0; e < Shape::A; ++e) oa[e] = T::from_bits(os[(w0 + Shape::a_row(ln, e)) * kLd + kk * Shape::K + Shape::a_col(ln, e)]);
          mma<Shape, T>(sf, qf[kk], kb);
          mma<Shape, T>(pf, oa, vb);
        }
        for (int e = 0; e < Shape::C; ++e) {
          const int r = w0 + Shape::c_row(ln, e), cj = f * Shape::N + Shape::c_col(ln, e);
          const int64_t i = i0 + r, j = j0 + cj;
          float ds = 0.0f;
          if (i < a.tq && j < kernels::attention_key_end(i, a.tq, a.tk, a.causal)) {
            const int64_t row = bh * a.tq + i;
            const float lse_i = lse[row];
            if (lse_i != -INFINITY) ds = ::expf(sf[e] * scale - lse_i) * (pf[e] * dropout_factor<float>(a, row, j) - delta[row]);
          }
          dss[r * kLdP + cj] = static_cast<T>(ds).bits;
        }
      }
      sync_threads();
      for (int kk = 0; kk < KT; ++kk) {  // dQ += dS K
        T sa[Shape::A];
        for (int e = 0; e < Shape::A; ++e) sa[e] = T::from_bits(dss[(w0 + Shape::a_row(ln, e)) * kLdP + kk * Shape::K + Shape::a_col(ln, e)]);
        for (int f = 0; f < FD; ++f) {
          T kb[Shape::B];
          for (int e = 0; e < Shape::B; ++e) kb[e] = T::from_bits(ks[(kk * Shape::K + Shape::b_row(ln, e)) * kLd + f * Shape::N + Shape::b_col(ln, e)]);
          mma<Shape, T>(dqf[f], sa, kb);
        }
      }
      sync_threads();
    }
    for (int f = 0; f < FD; ++f) {
      for (int e = 0; e < Shape::C; ++e) {
        const int64_t i = i0 + w0 + Shape::c_row(ln, e);
        const int x = f * Shape::N + Shape::c_col(ln, e);
        if (i < a.tq && x < a.d) dq[(bh * a.tq + i) * a.d + x] = static_cast<T>(dqf[f][e] * scale);
      }
    }
  }
}

// Launches the MMA backward (dK/dV and dQ) when T is 16-bit and the device has matrix units.
template <class T, int kD>
bool attention_bwd_mma(const AttnArgs& a, const T* go, const T* q, const T* k, const T* v, const compute_t<T>* lse, const compute_t<T>* delta,
                       T* dq, T* dk, T* dv) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    const Grid kv_grid = tiles_grid(a.bh * ((a.tk + 63) / 64)), q_grid = tiles_grid(a.bh * ((a.tq + 63) / 64));
    return with_mma_shape([&]<class Shape>() {
      if constexpr (kD >= 128) {  // two launches, each with half the accumulators (see the kernel)
        launch(attn_dkdv_mma_kernel<Shape, T, kD, kMakeDv>, kv_grid, Grid{4 * Shape::Warp}, 0, true, a, go, q, k, v, lse, delta, dk, dv);
        launch(attn_dkdv_mma_kernel<Shape, T, kD, kMakeDk>, kv_grid, Grid{4 * Shape::Warp}, 0, true, a, go, q, k, v, lse, delta, dk, dv);
      } else {
        launch(attn_dkdv_mma_kernel<Shape, T, kD, kMakeDv | kMakeDk>, kv_grid, Grid{4 * Shape::Warp}, 0, true, a, go, q, k, v, lse, delta, dk, dv);
      }
      launch(attn_dq_mma_kernel<Shape, T, kD>, q_grid, Grid{4 * Shape::Warp}, 0, true, a, go, q, k, v, lse, delta, dq);
    });
  } else {
    (void)a, (void)go, (void)q, (void)k, (void)v, (void)lse, (void)delta, (void)dq, (void)dk, (void)dv;
  }
  return false;
}

// Launches the MMA forward when T is 16-bit and the device has matrix units; false otherwise.
template <class T, int kD> bool attention_fwd_mma(const AttnArgs& a, const T* q, const T* k, const T* v, T* o, compute_t<T>* lse) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    const int64_t tiles = a.bh * ((a.tq + 63) / 64);  // 4 x 16 rows per block for both shapes
    return with_mma_shape([&]<class Shape>() {
      launch(attn_fwd_mma_kernel<Shape, T, kD>, tiles_grid(tiles), Grid{4 * Shape::Warp}, 0, true, a, q, k, v, o, lse);
    });
  } else {
    (void)a, (void)q, (void)k, (void)v, (void)o, (void)lse;
  }
  return false;
}

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
template <class T, int kD>
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
template <class T, int kD>
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

AttnArgs attn_args(const KernelCall& c, const Tensor& q, const Tensor& k, const Tensor& v) {
  return {q.size(0),    q.size(1),     k.size(1),      q.size(2),
          v.size(2),    c.attrs.scale, c.attrs.causal, static_cast<float>(1.0 - c.attrs.dropout_p),
          c.attrs.seed, c.attrs.offset};
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
  const AttnArgs a = attn_args(c, q, k, v);
  with_bucket(c, q.dtype(), a.d, a.dv, [&]<class T, int kD>() {
    using C = compute_t<T>;
    if (attention_fwd_mma<T, kD>(a, ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<T>(c.outputs[0]), ptr<C>(c.outputs[1]))) return;
    const int64_t tiles = a.bh * ((a.tq + attn_rows<C, kD>() - 1) / attn_rows<C, kD>());
    launch(attn_fwd_kernel<T, kD>, tiles_grid(tiles), Grid{kAttnThreads}, 0, true, a, ptr<const T>(q), ptr<const T>(k), ptr<const T>(v),
           ptr<T>(c.outputs[0]), ptr<C>(c.outputs[1]));
  });
}

void attention_bwd(const KernelCall& c) {
  const Tensor &go = c.inputs[0], &q = c.inputs[1], &k = c.inputs[2], &v = c.inputs[3], &o = c.inputs[4], &lse = c.inputs[5];
  const AttnArgs a = attn_args(c, q, k, v);
  const Tensor delta = empty({a.bh * a.tq}, lse.dtype(), lse.device());
  with_bucket(c, q.dtype(), a.d, a.dv, [&]<class T, int kD>() {
    using C = compute_t<T>;
    constexpr int kRows = attn_rows<C, kD>();
    launch(attn_delta_kernel<T>, warp_row_blocks(a.bh * a.tq), Grid{kThreads}, 0, true, a.bh * a.tq, a.dv, ptr<const T>(go),
           ptr<const T>(o), ptr<C>(delta));
    if (attention_bwd_mma<T, kD>(a, ptr<const T>(go), ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const C>(lse),
                                 ptr<const C>(delta), ptr<T>(c.outputs[0]), ptr<T>(c.outputs[1]), ptr<T>(c.outputs[2]))) {
      return;
    }
    launch(attn_dkdv_kernel<T, kD>, tiles_grid(a.bh * ((a.tk + kRows - 1) / kRows)), Grid{kAttnThreads}, 0, true, a, ptr<const T>(go),
           ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const C>(lse), ptr<const C>(delta), ptr<T>(c.outputs[1]),
           ptr<T>(c.outputs[2]));
    launch(attn_dq_kernel<T, kD>, tiles_grid(a.bh * ((a.tq + kRows - 1) / kRows)), Grid{kAttnThreads}, 0, true, a, ptr<const T>(go),
           ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const C>(lse), ptr<const C>(delta), ptr<T>(c.outputs[0]));
  });
}
}  // namespace

void register_attention_kernels(KernelTable& table) {
  table[OpId::Attention] = &attention_fwd;
  table[OpId::AttentionBackward] = &attention_bwd;
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
