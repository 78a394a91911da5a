#pragma once
// f16/bf16 fused attention on the matrix units (mma.h, mma_fragments.h): mma.sync on NVIDIA,
// MFMA on AMD and, on the emulator, the fragment-exact reference of both. Included by
// attention.cu inside its anonymous namespace (AttnArgs, dropout_factor, MaxOp/SumOp,
// tiles_grid, with_mask come from there). kMask: the instantiation that adds the additive mask
// (kernels::AttentionBias) to the scores; the unmasked ones do not carry its registers.
//
// FlashAttention-2's data flow: a block of 4 warps, each owning 16 rows of the output it makes
// (queries for the forward and dQ, keys for dK/dV), walking tiles of the other side staged in
// shared memory. Scores live in the MMA accumulators; the softmax runs on them in registers (a
// lane's rows are reduced across the kRowLanes lanes that share them), and where the accumulator
// layout is the next product's A layout (mma.sync) the probabilities feed that MMA straight from
// registers; elsewhere (MFMA, whose C is A's transpose) they pass through the warp's own rows of
// shared memory. The tiles are double buffered: the next tile's copies (cp.async on sm_80+) are
// in flight while this one is multiplied. When the output tiles alone cannot fill the device the
// long walk is split over several blocks (AttnSplit). exp2 with log2(e) folded into the scale;
// the log-sum-exp is stored in natural units for the backward. No atomics: the gradients are
// deterministic.

constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

/**
 * A walk (keys for the forward and dQ, queries for dK/dV) split over n blocks per output tile:
 * with few tiles (one head, long sequences) the causal triangle's longest tiles otherwise run
 * alone while most SMs idle. With n > 1 each block writes f32 partial results to the workspace
 * (part, part2: [n][rows][width]; m, l: [n][rows], log2 units), folded by attn_combine_kernel
 * (forward) or attn_sum_parts_kernel (gradients).
 */
struct AttnSplit {
  int n = 1;
  float *part = nullptr, *part2 = nullptr, *m = nullptr, *l = nullptr;
};
/** Split `split` of n's share [begin, end) of `count` steps. */
TESSERA_DEVICE void split_range(int64_t count, int split, int n, int64_t& begin, int64_t& end) {
  begin = count * split / n;
  end = count * (split + 1) / n;
}

/** The double-buffered K and V tiles of a key walk (tile t in buffer t & 1, row stride ld). */
template <int kD, int kKeys>
struct KvTiles {
  const uint16_t *k, *v;  // this batch-head's K and V rows
  uint16_t *ks, *vs;      // two buffers each
  int ld;
  bool vec_k, vec_v;
  /** Starts the copies of tile t (closing a group with whatever else was issued before). */
  TESSERA_DEVICE void issue(const AttnArgs& a, int64_t t) const {
    issue_rows<kD>(k, a.tk, a.d, t * kKeys, kKeys, ks + (t & 1) * kKeys * ld, ld, vec_k);
    issue_rows<kD>(v, a.tk, a.dv, t * kKeys, kKeys, vs + (t & 1) * kKeys * ld, ld, vec_v);
    async_copy_commit();
  }
  /** Before tile t is read: starts tile t + 1's copies if there is one, waits for tile t's (the
   *  caller's barrier then makes them the block's). */
  TESSERA_DEVICE void advance(const AttnArgs& a, int64_t t, int64_t end) const {
    if (t + 1 < end) {
      issue(a, t + 1);
      async_copy_wait<1>();
    } else {
      async_copy_wait<0>();
    }
  }
  TESSERA_DEVICE const uint16_t* k_tile(int64_t t) const { return ks + (t & 1) * kKeys * ld; }
  TESSERA_DEVICE const uint16_t* v_tile(int64_t t) const { return vs + (t & 1) * kKeys * ld; }
};

// Tile sizes shared by the kernels and their launchers (see each kernel for why).
template <int kD>
constexpr int fwd_keys() {
  return kD >= 128 ? 32 : 64;
}
template <class Shape, int kD>
constexpr int dq_keys() {
  return kD >= 128 ? 16 : (kD >= 64 || !Shape::kCIsA ? 32 : 64);
}
template <int kD>
constexpr int dkdv_queries() {
  return kD >= 64 ? 16 : 64;
}

// Forward: a block per 64 queries (16 per warp), key tiles of 64 (32 at head dim 128, so that two
// K and two V tiles fit the 48 KiB of static shared memory); the query tiles with the most keys
// first (causal), so that a grid of more blocks than fit ends evenly.
template <class Shape, class T, int kD, bool kMask>
TESSERA_GLOBAL void attn_fwd_mma_kernel(AttnArgs a, const T* q, const T* k, const T* v, T* o, float* lse, AttnSplit sp) {
  constexpr int kRows = 4 * Shape::M, kKeys = fwd_keys<kD>(), kLdK = kD + 8, kLdV = kKeys + 8, S = Shape::kRowSlots;
  constexpr int FS = kKeys / Shape::N, FD = kD / Shape::N, KD = kD / Shape::K, KT = kKeys / Shape::K;
  TESSERA_SHARED_ARRAY16(uint16_t, ks, 2 * kKeys * kLdK);  // two K tiles (double buffered), row = key
  TESSERA_SHARED_ARRAY16(uint16_t, vs, 2 * kKeys * kLdK);  // two V tiles, row = key
  TESSERA_SHARED_ARRAY16(uint16_t, ps, Shape::kCIsA ? 8 : kRows * kLdV);
  const int tid = static_cast<int>(thread_x()), ln = lane(), w0 = tid / Shape::Warp * Shape::M;
  uint16_t* mine = ps + (Shape::kCIsA ? 0 : w0 * kLdV);
  const float scale2 = static_cast<float>(a.scale) * kLog2e;
  const bool vec_k = rows_vectorizable(k, a.d, kD), vec_v = rows_vectorizable(v, a.dv, kD);
  const int64_t qtiles = (a.tq + kRows - 1) / kRows;
  for (int64_t item = block_x(); item < a.bh * qtiles * sp.n; item += grid_dim_x()) {
    const int64_t tile = item / sp.n, bh = tile / qtiles, i0 = (qtiles - 1 - tile % qtiles) * kRows;
    const int split = static_cast<int>(item % sp.n);
    const float* mask = kMask ? a.bias.plane<float>(bh) : nullptr;
    const uint16_t* kb = reinterpret_cast<const uint16_t*>(k + bh * a.tk * a.d);
    const uint16_t* vb = reinterpret_cast<const uint16_t*>(v + bh * a.tk * a.dv);
    uint32_t qf[KD][Shape::A / 2];
    load_a_global<Shape, T, KD>(qf, q + bh * a.tq * a.d, a.tq, a.d, i0 + w0, ln);
    float of[FD][Shape::C], m[S], l[S];
    TESSERA_UNROLL
    for (int f = 0; f < FD; ++f) {
      TESSERA_UNROLL
      for (int e = 0; e < Shape::C; ++e) of[f][e] = 0.0f;
    }
    TESSERA_UNROLL
    for (int s = 0; s < S; ++s) m[s] = -INFINITY, l[s] = 0.0f;
    const int64_t last = i0 + kRows - 1 < a.tq ? i0 + kRows - 1 : a.tq - 1;
    const int64_t kend = kernels::attention_key_end(last, a.tq, a.tk, a.causal);
    const int64_t kfull = kernels::attention_key_end(i0, a.tq, a.tk, a.causal);  // keys every row of the block sees
    int64_t tbegin = 0, ntiles = 0;
    split_range((kend + kKeys - 1) / kKeys, split, sp.n, tbegin, ntiles);
    const KvTiles<kD, kKeys> kv{kb, vb, ks, vs, kLdK, vec_k, vec_v};
    if (ntiles > tbegin) kv.issue(a, tbegin);
    for (int64_t t = tbegin; t < ntiles; ++t) {
      const int64_t j0 = t * kKeys;
      const uint16_t *kt = kv.k_tile(t), *vt = kv.v_tile(t);
      kv.advance(a, t, ntiles);  // the next tile's copies fly while this one is multiplied
      sync_threads();
      float sf[FS][Shape::C];
      TESSERA_UNROLL
      for (int f = 0; f < FS; ++f) {  // S = Q K^T
        TESSERA_UNROLL
        for (int e = 0; e < Shape::C; ++e) sf[f][e] = 0.0f;
        TESSERA_UNROLL
        for (int kk = 0; kk < KD; ++kk) {
          uint32_t kw[Shape::B / 2];
          load_b_words_nk<Shape>(kw, kt, kLdK, f * Shape::N, kk * Shape::K, ln);
          mma_w<Shape, T>(sf[f], qf[kk], kw);
        }
      }
      const bool masked = j0 + kKeys > kfull;
      // This warp's corner of the tile in the mask: 32-bit offsets from it (rows < 16, keys < 64).
      const float* mt = kMask ? mask + (i0 + w0) * a.bias.s_q + j0 * a.bias.s_k : nullptr;
      float mx[S];
      TESSERA_UNROLL
      for (int s = 0; s < S; ++s) mx[s] = -INFINITY;
      TESSERA_UNROLL
      for (int f = 0; f < FS; ++f) {
        TESSERA_UNROLL
        for (int e = 0; e < Shape::C; ++e) {
          float x = sf[f][e] * scale2;
          if (masked || kMask) {  // rows past tq read no mask: only the causal edge and the last tile are `masked`
            const int64_t i = i0 + w0 + Shape::c_row(ln, e), j = j0 + f * Shape::N + Shape::c_col(ln, e);
            if (i >= a.tq || j >= kernels::attention_key_end(i, a.tq, a.tk, a.causal)) x = -INFINITY;
            else if (kMask) x = fmaf(mt[Shape::c_row(ln, e) * a.bias.s_q + (f * Shape::N + Shape::c_col(ln, e)) * a.bias.s_k], kLog2e, x);
          }
          sf[f][e] = x;
          mx[Shape::slot(e)] = fmaxf(mx[Shape::slot(e)], x);
        }
      }
      float base[S], alpha[S];
      TESSERA_UNROLL
      for (int s = 0; s < S; ++s) {
        const float mn = fmaxf(m[s], row_allreduce<Shape>(mx[s], MaxOp<float>{}));
        base[s] = mn == -INFINITY ? 0.0f : mn;  // a row with no key yet: p = 0, not NaN
        alpha[s] = ::exp2f(m[s] - base[s]);
        m[s] = mn;
        l[s] *= alpha[s];
      }
      TESSERA_UNROLL
      for (int f = 0; f < FS; ++f) {
        TESSERA_UNROLL
        for (int e = 0; e < Shape::C; ++e) {
          float p = ::exp2f(sf[f][e] - base[Shape::slot(e)]);
          l[Shape::slot(e)] += p;  // this lane's part of the row sum: reduced across lanes once, at the end
          if (a.keep < 1.0f)
            p *= dropout_factor<float>(a, bh * a.tq + i0 + w0 + Shape::c_row(ln, e), j0 + f * Shape::N + Shape::c_col(ln, e));
          sf[f][e] = p;
        }
      }
      TESSERA_UNROLL
      for (int f = 0; f < FD; ++f) {
        TESSERA_UNROLL
        for (int e = 0; e < Shape::C; ++e) of[f][e] *= alpha[Shape::slot(e)];
      }
      mma_accum_times_kn<Shape, T, KT, FD, FS>(of, sf, mine, kLdV, vt, kLdK, ln);  // O += P V
      sync_threads();  // before the copies of tile t + 2 overwrite this buffer, and the next P rows
    }
    TESSERA_UNROLL
    for (int s = 0; s < S; ++s) l[s] = row_allreduce<Shape>(l[s], SumOp<float>{});
    const int64_t rows = a.bh * a.tq, base = split * rows;  // partial results: this split's slice
    TESSERA_UNROLL
    for (int f = 0; f < FD; ++f) {
      TESSERA_UNROLL
      for (int e = 0; e < Shape::C; ++e) {
        const int64_t i = i0 + w0 + Shape::c_row(ln, e);
        const int x = f * Shape::N + Shape::c_col(ln, e);
        const float li = l[Shape::slot(e)];
        if (i >= a.tq || x >= a.dv) continue;
        if (sp.n > 1) sp.part[(base + bh * a.tq + i) * a.dv + x] = of[f][e];  // unnormalised
        else o[(bh * a.tq + i) * a.dv + x] = static_cast<T>(li > 0 ? of[f][e] / li : 0.0f);
      }
    }
    TESSERA_UNROLL
    for (int e = 0; e < Shape::C; ++e) {  // one lane per row (the one holding column 0)
      const int64_t i = i0 + w0 + Shape::c_row(ln, e);
      const float li = l[Shape::slot(e)], mi = m[Shape::slot(e)];
      if (Shape::c_col(ln, e) != 0 || i >= a.tq) continue;
      if (sp.n > 1) sp.m[base + bh * a.tq + i] = mi, sp.l[base + bh * a.tq + i] = li;
      else lse[bh * a.tq + i] = li > 0 ? (mi + ::log2f(li)) * kLn2 : -INFINITY;
    }
  }
}

// Folds the forward's split partial results: per row (a warp), M = max m_s, L = sum l_s 2^(m_s - M),
// O = sum O_s 2^(m_s - M) / L and the log-sum-exp (M + log2 L) ln 2.
template <class T>
TESSERA_GLOBAL void attn_combine_kernel(int64_t rows, int64_t dv, int n, const float* part, const float* m, const float* l, T* o,
                                        float* lse) {
  const int ws = warp_size(), ln = lane();
  for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
    float mx = -INFINITY, sum = 0.0f;
    for (int s = 0; s < n; ++s) mx = fmaxf(mx, m[s * rows + r]);
    for (int s = 0; s < n; ++s) sum += l[s * rows + r] > 0 ? l[s * rows + r] * ::exp2f(m[s * rows + r] - mx) : 0.0f;
    for (int64_t x = ln; x < dv; x += ws) {
      float acc = 0.0f;
      for (int s = 0; s < n; ++s) {
        if (l[s * rows + r] > 0) acc += part[(s * rows + r) * dv + x] * ::exp2f(m[s * rows + r] - mx);
      }
      o[r * dv + x] = static_cast<T>(sum > 0 ? acc / sum : 0.0f);
    }
    if (ln == 0) lse[r] = sum > 0 ? (mx + ::log2f(sum)) * kLn2 : -INFINITY;
  }
}

// out[i] = scale * sum over the n splits of part[s][i], in T: the gradients' split partial sums.
template <class T>
TESSERA_GLOBAL void attn_sum_parts_kernel(int64_t count, int n, const float* part, float scale, T* out) {
  for (int64_t i = global_index(); i < count; i += grid_stride()) {
    float acc = 0.0f;
    for (int s = 0; s < n; ++s) acc += part[s * count + i];
    out[i] = static_cast<T>(acc * scale);
  }
}

// The log-sum-exp of a row in log2 units, +inf for a row that saw no key (its p = exp2(s - inf) = 0).
TESSERA_DEVICE float lse_log2(float lse) { return lse == -INFINITY ? INFINITY : lse * kLog2e; }

// dK/dV: a block per 64 keys (16 per warp, held as A fragments: row = key), walking the query
// tiles; per warp S^T = K Q^T and dP^T = V dO^T, P and dS on the accumulators, then dV += P^T dO
// and dK += dS^T Q with P^T and dS^T as A fragments. kParts: which gradients this launch makes
// (1 dV, 2 dK, 3 both); at head dim 128 one launch holding dK and dV accumulators beside the
// K and V fragments would spill, so there each is its own launch (dK also recomputes dP, with
// the block's V rows in shared memory rather than registers).
enum : int { kMakeDv = 1, kMakeDk = 2 };
template <class Shape, class T, int kD, int kParts, bool kMask>
TESSERA_GLOBAL void attn_dkdv_mma_kernel(AttnArgs a, const T* go, const T* q, const T* k, const T* v, const float* lse, const float* delta,
                                         T* dk, T* dv, AttnSplit sp) {
  constexpr bool kDv = (kParts & kMakeDv) != 0, kDk = (kParts & kMakeDk) != 0, kVShared = kDk && !kDv;
  // Queries per step: fewer as the head dim grows, so that S^T and dP^T fit beside the K, V, dK and
  // dV fragments without spilling on sm_90.
  constexpr int kKeys = 4 * Shape::M, kQ = dkdv_queries<kD>(), kLd = kD + 8, kLdQ = kQ + 8;
  constexpr int FQ = kQ / Shape::N, FD = kD / Shape::N, KD = kD / Shape::K, KQ = kQ / Shape::K;
  TESSERA_SHARED_ARRAY16(uint16_t, qs, 2 * kQ * kLd);  // two query tiles (double buffered)
  TESSERA_SHARED_ARRAY16(uint16_t, dos, 2 * kQ * kLd);
  TESSERA_SHARED_ARRAY(float, rows, 2 * 2 * kQ);  // log2-unit lse and delta of each query tile
  TESSERA_SHARED_ARRAY16(uint16_t, vsh, kVShared ? kKeys * kLd : 8);
  TESSERA_SHARED_ARRAY16(uint16_t, pz, Shape::kCIsA || !kDv ? 8 : kKeys * kLdQ);
  TESSERA_SHARED_ARRAY16(uint16_t, dss, Shape::kCIsA || !kDk ? 8 : kKeys * kLdQ);
  const int tid = static_cast<int>(thread_x()), ln = lane(), w0 = tid / Shape::Warp * Shape::M;
  uint16_t* pz_mine = pz + (Shape::kCIsA || !kDv ? 0 : w0 * kLdQ);
  uint16_t* ds_mine = dss + (Shape::kCIsA || !kDk ? 0 : w0 * kLdQ);
  const float scale = static_cast<float>(a.scale), scale2 = scale * kLog2e;
  const bool vec_q = rows_vectorizable(q, a.d, kD), vec_o = rows_vectorizable(go, a.dv, kD), vec_v = rows_vectorizable(v, a.dv, kD);
  const int64_t ktiles = (a.tk + kKeys - 1) / kKeys;
  for (int64_t item = block_x(); item < a.bh * ktiles * sp.n; item += grid_dim_x()) {
    const int64_t tile = item / sp.n, bh = tile / ktiles, j0 = (tile % ktiles) * kKeys;  // causal: the first key tiles see the most queries
    const int split = static_cast<int>(item % sp.n);
    const float* mask = kMask ? a.bias.plane<float>(bh) : nullptr;
    uint32_t kf[KD][Shape::A / 2], vf[kDk && !kVShared ? KD : 1][Shape::A / 2];
    load_a_global<Shape, T, KD>(kf, k + bh * a.tk * a.d, a.tk, a.d, j0 + w0, ln);
    if constexpr (kDk && !kVShared) load_a_global<Shape, T, KD>(vf, v + bh * a.tk * a.dv, a.tk, a.dv, j0 + w0, ln);
    float dkf[kDk ? FD : 1][Shape::C], dvf[kDv ? FD : 1][Shape::C];
    TESSERA_UNROLL
    for (int f = 0; f < FD; ++f) {
      TESSERA_UNROLL
      for (int e = 0; e < Shape::C; ++e) {
        if constexpr (kDk) dkf[f][e] = 0.0f;
        if constexpr (kDv) dvf[f][e] = 0.0f;
      }
    }
    int64_t first = a.causal ? j0 - (a.tk - a.tq) : 0;
    first = first < 0 ? 0 : first / kQ * kQ;
    const uint16_t* qb = reinterpret_cast<const uint16_t*>(q + bh * a.tq * a.d);
    const uint16_t* ob = reinterpret_cast<const uint16_t*>(go + bh * a.tq * a.dv);
    const auto issue = [&](int64_t i0, int buf) {  // the copies of one query tile into buffer `buf`
      issue_rows<kD>(qb, a.tq, a.d, i0, kQ, qs + buf * kQ * kLd, kLd, vec_q);
      issue_rows<kD>(ob, a.tq, a.dv, i0, kQ, dos + buf * kQ * kLd, kLd, vec_o);
      if (tid < kQ) {
        const bool in = i0 + tid < a.tq;
        rows[buf * 2 * kQ + tid] = in ? lse_log2(lse[bh * a.tq + i0 + tid]) : INFINITY;
        rows[buf * 2 * kQ + kQ + tid] = in ? delta[bh * a.tq + i0 + tid] : 0.0f;
      }
      async_copy_commit();
    };
    int64_t sbegin = 0, send = 0;  // this split's query steps
    split_range((a.tq - first + kQ - 1) / kQ, split, sp.n, sbegin, send);
    if (sbegin < send) {
      if constexpr (kVShared) {  // in the first tile's group; the previous tile's reads ended at its last barrier
        issue_rows<kD>(reinterpret_cast<const uint16_t*>(v + bh * a.tk * a.dv), a.tk, a.dv, j0, kKeys, vsh, kLd, vec_v);
      }
      issue(first + sbegin * kQ, static_cast<int>(sbegin & 1));
    }
    for (int64_t step = sbegin; step < send; ++step) {
      const int64_t i0 = first + step * kQ;
      const int buf = static_cast<int>(step & 1);
      const uint16_t *qt = qs + buf * kQ * kLd, *ot = dos + buf * kQ * kLd;
      const float* rw = rows + buf * 2 * kQ;
      if (step + 1 < send) {  // the next tile's copies fly while this one is multiplied
        issue(i0 + kQ, buf ^ 1);
        async_copy_wait<1>();
      } else {
        async_copy_wait<0>();
      }
      sync_threads();
      float sf[FQ][Shape::C], pf[FQ][Shape::C];
      TESSERA_UNROLL
      for (int f = 0; f < FQ; ++f) {  // S^T = K Q^T, dP^T = V dO^T: B[x][i] = Q[i][x], dO[i][x]
        TESSERA_UNROLL
        for (int e = 0; e < Shape::C; ++e) sf[f][e] = 0.0f, pf[f][e] = 0.0f;
        TESSERA_UNROLL
        for (int kk = 0; kk < KD; ++kk) {
          uint32_t w[Shape::B / 2];
          load_b_words_nk<Shape>(w, qt, kLd, f * Shape::N, kk * Shape::K, ln);
          mma_w<Shape, T>(sf[f], kf[kk], w);
          if constexpr (kVShared) {
            uint32_t va[Shape::A / 2];
            load_a_words<Shape>(va, vsh, kLd, w0, kk * Shape::K, ln);
            load_b_words_nk<Shape>(w, ot, kLd, f * Shape::N, kk * Shape::K, ln);
            mma_w<Shape, T>(pf[f], va, w);
          } else if constexpr (kDk) {
            load_b_words_nk<Shape>(w, ot, kLd, f * Shape::N, kk * Shape::K, ln);
            mma_w<Shape, T>(pf[f], vf[kk], w);
          }
        }
      }
      // Every (key, query) pair of the step is visible unless it reaches the causal edge or a border.
      const bool masked = i0 + kQ > a.tq || j0 + kKeys > kernels::attention_key_end(i0, a.tq, a.tk, a.causal);
      TESSERA_UNROLL
      for (int f = 0; f < FQ; ++f) {
        TESSERA_UNROLL
        for (int e = 0; e < Shape::C; ++e) {
          const int ci = f * Shape::N + Shape::c_col(ln, e);
          const int64_t j = j0 + w0 + Shape::c_row(ln, e), i = i0 + ci;
          const bool valid = !masked || (i < a.tq && j < a.tk && j < kernels::attention_key_end(i, a.tq, a.tk, a.causal));
          float x = sf[f][e] * scale2;
          if (kMask && valid) x = fmaf(mask[i * a.bias.s_q + j * a.bias.s_k], kLog2e, x);
          float p = valid ? ::exp2f(x - rw[ci]) : 0.0f;
          const float z = a.keep < 1.0f ? dropout_factor<float>(a, bh * a.tq + i, j) : 1.0f;
          pf[f][e] = p * (pf[f][e] * z - rw[kQ + ci]);  // dS (used only where dK is made)
          sf[f][e] = p * z;
        }
      }
      if constexpr (kDv) mma_accum_times_kn<Shape, T, KQ, FD, FQ>(dvf, sf, pz_mine, kLdQ, ot, kLd, ln);  // dV += P^T dO
      if constexpr (kDk) mma_accum_times_kn<Shape, T, KQ, FD, FQ>(dkf, pf, ds_mine, kLdQ, qt, kLd, ln);  // dK += dS^T Q (scaled at the end)
      sync_threads();  // before the copies of tile step + 2 overwrite this buffer
    }
    TESSERA_UNROLL
    for (int f = 0; f < FD; ++f) {
      TESSERA_UNROLL
      for (int e = 0; e < Shape::C; ++e) {
        const int64_t j = j0 + w0 + Shape::c_row(ln, e);
        const int x = f * Shape::N + Shape::c_col(ln, e);
        if (j >= a.tk) continue;
        const int64_t at = split * a.bh * a.tk + bh * a.tk + j;  // this split's slice of the partial sums
        if constexpr (kDk) {
          if (x < a.d && sp.n > 1) sp.part[at * a.d + x] = dkf[f][e];  // scaled when summed
          else if (x < a.d) dk[(bh * a.tk + j) * a.d + x] = static_cast<T>(dkf[f][e] * scale);
        }
        if constexpr (kDv) {
          if (x < a.dv && sp.n > 1) sp.part2[at * a.dv + x] = dvf[f][e];
          else if (x < a.dv) dv[(bh * a.tk + j) * a.dv + x] = static_cast<T>(dvf[f][e]);
        }
      }
    }
  }
}

// dQ: a block per 64 queries walking the key tiles (double buffered; 64 keys, 32 where dS goes
// through shared memory, 16 at head dim 128, to fit 48 KiB): S = Q K^T and dP = dO V^T on the
// accumulators, dS as the A fragments of dQ += dS K.
template <class Shape, class T, int kD, bool kMask>
TESSERA_GLOBAL void attn_dq_mma_kernel(AttnArgs a, const T* go, const T* q, const T* k, const T* v, const float* lse, const float* delta,
                                       T* dq, AttnSplit sp) {
  constexpr int kRows = 4 * Shape::M, kKeys = dq_keys<Shape, kD>(), kLd = kD + 8, kLdS = kKeys + 8;
  constexpr int S = Shape::kRowSlots;
  constexpr int FS = kKeys / Shape::N, FD = kD / Shape::N, KD = kD / Shape::K, KT = kKeys / Shape::K;
  TESSERA_SHARED_ARRAY16(uint16_t, ks, 2 * kKeys * kLd);  // two K and two V tiles, row = key
  TESSERA_SHARED_ARRAY16(uint16_t, vs, 2 * kKeys * kLd);
  // The block's output-gradient rows stay in shared memory, read as A fragments where used:
  // held in registers beside Q and dQ they pushed the head-dim-128 kernel into spills on sm_90.
  TESSERA_SHARED_ARRAY16(uint16_t, os, kRows * kLd);
  TESSERA_SHARED_ARRAY16(uint16_t, dss, Shape::kCIsA ? 8 : kRows * kLdS);
  const int tid = static_cast<int>(thread_x()), ln = lane(), w0 = tid / Shape::Warp * Shape::M;
  uint16_t* ds_mine = dss + (Shape::kCIsA ? 0 : w0 * kLdS);
  const float scale = static_cast<float>(a.scale), scale2 = scale * kLog2e;
  const bool vec_k = rows_vectorizable(k, a.d, kD), vec_v = rows_vectorizable(v, a.dv, kD), vec_o = rows_vectorizable(go, a.dv, kD);
  const int64_t qtiles = (a.tq + kRows - 1) / kRows;
  for (int64_t item = block_x(); item < a.bh * qtiles * sp.n; item += grid_dim_x()) {
    const int64_t tile = item / sp.n, bh = tile / qtiles, i0 = (qtiles - 1 - tile % qtiles) * kRows;  // the most keys first
    const int split = static_cast<int>(item % sp.n);
    const float* mask = kMask ? a.bias.plane<float>(bh) : nullptr;
    uint32_t qf[KD][Shape::A / 2];
    load_a_global<Shape, T, KD>(qf, q + bh * a.tq * a.d, a.tq, a.d, i0 + w0, ln);
    float lse2[S], dl[S];
    TESSERA_UNROLL
    for (int e = 0; e < Shape::C; ++e) {
      const int64_t i = i0 + w0 + Shape::c_row(ln, e);
      lse2[Shape::slot(e)] = i < a.tq ? lse_log2(lse[bh * a.tq + i]) : INFINITY;
      dl[Shape::slot(e)] = i < a.tq ? delta[bh * a.tq + i] : 0.0f;
    }
    sync_threads();  // the previous tile's last reads of os are done
    float dqf[FD][Shape::C];
    TESSERA_UNROLL
    for (int f = 0; f < FD; ++f) {
      TESSERA_UNROLL
      for (int e = 0; e < Shape::C; ++e) dqf[f][e] = 0.0f;
    }
    const int64_t last = i0 + kRows - 1 < a.tq ? i0 + kRows - 1 : a.tq - 1;
    const int64_t kend = kernels::attention_key_end(last, a.tq, a.tk, a.causal);
    const int64_t kfull = kernels::attention_key_end(i0, a.tq, a.tk, a.causal);
    const uint16_t* kb = reinterpret_cast<const uint16_t*>(k + bh * a.tk * a.d);
    const uint16_t* vb = reinterpret_cast<const uint16_t*>(v + bh * a.tk * a.dv);
    int64_t tbegin = 0, ntiles = 0;
    split_range((kend + kKeys - 1) / kKeys, split, sp.n, tbegin, ntiles);
    const KvTiles<kD, kKeys> kv{kb, vb, ks, vs, kLd, vec_k, vec_v};
    if (ntiles > tbegin) {  // dO rows in the first tile's group
      issue_rows<kD>(reinterpret_cast<const uint16_t*>(go + bh * a.tq * a.dv), a.tq, a.dv, i0, kRows, os, kLd, vec_o);
      kv.issue(a, tbegin);
    }
    for (int64_t t = tbegin; t < ntiles; ++t) {
      const int64_t j0 = t * kKeys;
      const uint16_t *kt = kv.k_tile(t), *vt = kv.v_tile(t);
      kv.advance(a, t, ntiles);  // the next tile's copies fly while this one is multiplied
      sync_threads();
      float sf[FS][Shape::C], pf[FS][Shape::C];
      TESSERA_UNROLL
      for (int f = 0; f < FS; ++f) {
        TESSERA_UNROLL
        for (int e = 0; e < Shape::C; ++e) sf[f][e] = 0.0f, pf[f][e] = 0.0f;
      }
      TESSERA_UNROLL
      for (int kk = 0; kk < KD; ++kk) {  // S = Q K^T, dP = dO V^T
        uint32_t oa[Shape::A / 2];
        load_a_words<Shape>(oa, os, kLd, w0, kk * Shape::K, ln);
        TESSERA_UNROLL
        for (int f = 0; f < FS; ++f) {
          uint32_t w[Shape::B / 2];
          load_b_words_nk<Shape>(w, kt, kLd, f * Shape::N, kk * Shape::K, ln);
          mma_w<Shape, T>(sf[f], qf[kk], w);
          load_b_words_nk<Shape>(w, vt, kLd, f * Shape::N, kk * Shape::K, ln);
          mma_w<Shape, T>(pf[f], oa, w);
        }
      }
      const bool masked = j0 + kKeys > kfull;
      TESSERA_UNROLL
      for (int f = 0; f < FS; ++f) {
        TESSERA_UNROLL
        for (int e = 0; e < Shape::C; ++e) {
          const int64_t i = i0 + w0 + Shape::c_row(ln, e), j = j0 + f * Shape::N + Shape::c_col(ln, e);
          const bool valid = !masked || (i < a.tq && j < kernels::attention_key_end(i, a.tq, a.tk, a.causal));
          float x = sf[f][e] * scale2;
          if (kMask && valid && i < a.tq) x = fmaf(mask[i * a.bias.s_q + j * a.bias.s_k], kLog2e, x);  // rows past tq: no mask to read
          const float p = valid ? ::exp2f(x - lse2[Shape::slot(e)]) : 0.0f;
          const float z = a.keep < 1.0f ? dropout_factor<float>(a, bh * a.tq + i, j) : 1.0f;
          sf[f][e] = p * (pf[f][e] * z - dl[Shape::slot(e)]);  // dS
        }
      }
      mma_accum_times_kn<Shape, T, KT, FD, FS>(dqf, sf, ds_mine, kLdS, kt, kLd, ln);  // dQ += dS K
      sync_threads();
    }
    TESSERA_UNROLL
    for (int f = 0; f < FD; ++f) {
      TESSERA_UNROLL
      for (int e = 0; e < Shape::C; ++e) {
        const int64_t i = i0 + w0 + Shape::c_row(ln, e);
        const int x = f * Shape::N + Shape::c_col(ln, e);
        if (i >= a.tq || x >= a.d) continue;
        if (sp.n > 1) sp.part[(split * a.bh * a.tq + bh * a.tq + i) * a.d + x] = dqf[f][e];  // scaled when summed
        else dq[(bh * a.tq + i) * a.d + x] = static_cast<T>(dqf[f][e] * scale);
      }
    }
  }
}

// Split sizes use device_units() (runtime.h); the emulator models 8 SMs, so the small shapes of
// the tests take the split paths there.
/** Blocks per output tile for a walk of `walk` steps over `tiles` output tiles: about two blocks
 *  per SM in all, at most 4 per tile, 1 when the tiles alone fill the device. */
inline int attention_splits(int64_t tiles, int64_t walk) {
  const int64_t want = (2 * device_units() + tiles - 1) / (tiles > 0 ? tiles : 1);
  return static_cast<int>(std::clamp<int64_t>(std::min(want, walk), 1, 4));
}

/** f32 partial results of an n-way split: `widths` floats per row for each of `rows` rows. */
inline Tensor split_workspace(int n, int64_t rows, int64_t widths, Device dev) {
  return n > 1 ? empty({n * rows * widths}, DType::f32, dev) : Tensor();
}

// Launches the MMA backward (dK/dV and dQ) when T is 16-bit and the device has matrix units.
template <class T, int kD>
bool attention_bwd_mma(const AttnArgs& a, const T* go, const T* q, const T* k, const T* v, const compute_t<T>* lse,
                       const compute_t<T>* delta, T* dq, T* dk, T* dv, Device dev) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    if (device_mma_kind() == MmaKind::none) return false;
    const int64_t ktiles = a.bh * ((a.tk + 63) / 64), qtiles = a.bh * ((a.tq + 63) / 64);
    AttnSplit skv, sq;
    skv.n = attention_splits(ktiles, (a.tq + dkdv_queries<kD>() - 1) / dkdv_queries<kD>());
    const Tensor kv_work = split_workspace(skv.n, a.bh * a.tk, a.d + a.dv, dev);
    if (skv.n > 1) skv.part = ptr<float>(kv_work), skv.part2 = skv.part + skv.n * a.bh * a.tk * a.d;
    return with_mma_shape([&]<class Shape>() {
      sq.n = attention_splits(qtiles, (a.tk + dq_keys<Shape, kD>() - 1) / dq_keys<Shape, kD>());
      const Tensor q_work = split_workspace(sq.n, a.bh * a.tq, a.d, dev);
      if (sq.n > 1) sq.part = ptr<float>(q_work);
      const Grid kv_grid = tiles_grid(ktiles * skv.n), q_grid = tiles_grid(qtiles * sq.n), block{4 * Shape::Warp};
      with_mask(a, [&]<bool kMask>() {
        if constexpr (kD >= 128) {  // two launches, each with half the accumulators (see the kernel)
          launch(attn_dkdv_mma_kernel<Shape, T, kD, kMakeDv, kMask>, kv_grid, block, 0, true, a, go, q, k, v, lse, delta, dk, dv, skv);
          launch(attn_dkdv_mma_kernel<Shape, T, kD, kMakeDk, kMask>, kv_grid, block, 0, true, a, go, q, k, v, lse, delta, dk, dv, skv);
        } else {
          launch(attn_dkdv_mma_kernel<Shape, T, kD, kMakeDv | kMakeDk, kMask>, kv_grid, block, 0, true, a, go, q, k, v, lse, delta, dk, dv,
                 skv);
        }
        launch(attn_dq_mma_kernel<Shape, T, kD, kMask>, q_grid, block, 0, true, a, go, q, k, v, lse, delta, dq, sq);
      });
      const float scale = static_cast<float>(a.scale);
      if (skv.n > 1) {
        const int64_t nk = a.bh * a.tk * a.d, nv = a.bh * a.tk * a.dv;
        launch(attn_sum_parts_kernel<T>, blocks_for(nk), Grid{kThreads}, 0, false, nk, skv.n, static_cast<const float*>(skv.part), scale,
               dk);
        launch(attn_sum_parts_kernel<T>, blocks_for(nv), Grid{kThreads}, 0, false, nv, skv.n, static_cast<const float*>(skv.part2), 1.0f,
               dv);
      }
      if (sq.n > 1) {
        const int64_t nq = a.bh * a.tq * a.d;
        launch(attn_sum_parts_kernel<T>, blocks_for(nq), Grid{kThreads}, 0, false, nq, sq.n, static_cast<const float*>(sq.part), scale, dq);
      }
    });
  } else {
    (void)a, (void)go, (void)q, (void)k, (void)v, (void)lse, (void)delta, (void)dq, (void)dk, (void)dv, (void)dev;
  }
  return false;
}

// Launches the MMA forward when T is 16-bit and the device has matrix units; false otherwise.
template <class T, int kD>
bool attention_fwd_mma(const AttnArgs& a, const T* q, const T* k, const T* v, T* o, compute_t<T>* lse, Device dev) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    if (device_mma_kind() == MmaKind::none) return false;
    const int64_t tiles = a.bh * ((a.tq + 63) / 64), rows = a.bh * a.tq;  // 4 x 16 rows per block for both shapes
    AttnSplit sp;
    sp.n = attention_splits(tiles, (a.tk + fwd_keys<kD>() - 1) / fwd_keys<kD>());
    const Tensor work = split_workspace(sp.n, rows, a.dv + 2, dev);
    if (sp.n > 1) sp.part = ptr<float>(work), sp.m = sp.part + sp.n * rows * a.dv, sp.l = sp.m + sp.n * rows;
    return with_mma_shape([&]<class Shape>() {
      with_mask(a, [&]<bool kMask>() {
        launch(attn_fwd_mma_kernel<Shape, T, kD, kMask>, tiles_grid(tiles * sp.n), Grid{4 * Shape::Warp}, 0, true, a, q, k, v, o, lse, sp);
      });
      if (sp.n > 1) {
        launch(attn_combine_kernel<T>, warp_row_blocks(rows), Grid{kThreads}, 0, true, rows, a.dv, sp.n, static_cast<const float*>(sp.part),
               static_cast<const float*>(sp.m), static_cast<const float*>(sp.l), o, lse);
      }
    });
  } else {
    (void)a, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)dev;
  }
  return false;
}
