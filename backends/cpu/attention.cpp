// Fused scaled dot-product attention (FlashAttention-2 style) on the CPU. Forward: tasks of
// (batch-head, 16-query block) walk 64-key blocks with an online softmax, keeping only the
// running max, sum and output rows; the key block is transposed once so the score loop runs
// along keys (a fixed 64-wide vector FMA per head-dim element) and exp runs vectorised along
// keys (vec_math.h). Backward: a task per batch-head recomputes the probabilities from the saved
// log-sum-exp, block by block, accumulating dK and dV for the whole head in thread-local rows
// (O(T) memory) and dQ per query block. Compute in f32 for f32/f16/bf16, f64 for f64.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "../common/attention_bias.h"
#include "../common/dtype_dispatch.h"
#include "cpu_backend.h"
#include "vec_math.h"
#include "tessera/kernels/attention.h"
#include "tessera/kernels/convert.h"

TESSERA_CPU_KERNELS_BEGIN
namespace {

constexpr int64_t kBq = 16;  // query rows per block
constexpr int64_t kBk = 64;  // keys per block (the vector length of the score loops)

template <class C> inline C exp_c(C x) {
  if constexpr (std::is_same_v<C, float>) return vmath::exp(x);
  else return std::exp(x);
}

struct AttnGeom {
  int64_t bh, tq, tk, d, dv;
  double scale;
  bool causal;
  float keep;  // 1 - dropout p
  uint64_t seed, offset;
  kernels::AttentionBias bias;  // the additive mask, if any
  bool dropout() const { return keep < 1.0f; }
  // s[jj] += mask(bh, i, j0 + jj) for the n visible keys of a block.
  template <class C>
  void add_bias(int64_t bh, int64_t i, int64_t j0, int64_t n, C* s) const {
    if (!bias.defined()) return;
    const C* b = bias.row<C>(bh, i) + j0 * bias.s_k;
    for (int64_t jj = 0; jj < n; ++jj) s[jj] += b[jj * bias.s_k];
  }
};

// inputs: q, k, v and the optional mask (the backward passes its own span from q on).
AttnGeom geometry(const KernelCall& c, std::span<const Tensor> in) {
  const Tensor &q = in[0], &v = in[2];
  return {q.size(0),
          q.size(1),
          in[1].size(1),
          q.size(2),
          v.size(2),
          c.attrs.scale,
          c.attrs.causal,
          static_cast<float>(1.0 - c.attrs.dropout_p),
          c.attrs.seed,
          c.attrs.offset,
          backend_common::attention_bias(in, 3)};
}

// Key block [j0, j0 + jn) of head bh as kt[x * kBk + jj] = src[j0 + jj][x] (zero past jn).
template <class T, class C> void load_transposed(const T* src, int64_t width, int64_t j0, int64_t jn, C* kt) {
  std::fill(kt, kt + width * kBk, C(0));
  for (int64_t jj = 0; jj < jn; ++jj) {
    const T* row = src + (j0 + jj) * width;
    for (int64_t x = 0; x < width; ++x) kt[x * kBk + jj] = static_cast<C>(row[x]);
  }
}

// s[jj] = sum_x a[x] * bt[x * kBk + jj] over the block's 64 keys.
template <class C> inline void row_scores(const C* a, const C* bt, int64_t width, C* s) {
  C acc[kBk] = {};
  for (int64_t x = 0; x < width; ++x) {
    const C ax = a[x];
    const C* b = bt + x * kBk;
    for (int64_t jj = 0; jj < kBk; ++jj) acc[jj] += ax * b[jj];
  }
  std::copy(acc, acc + kBk, s);
}

template <class T> void attention_forward(const KernelCall& c) {
  using C = compute_t<T>;
  const AttnGeom g = geometry(c, c.inputs);
  const T* q = static_cast<const T*>(c.inputs[0].data_ptr());
  const T* k = static_cast<const T*>(c.inputs[1].data_ptr());
  const T* v = static_cast<const T*>(c.inputs[2].data_ptr());
  T* o = static_cast<T*>(c.outputs[0].data_ptr());
  C* lse = static_cast<C*>(c.outputs[1].data_ptr());
  const int64_t qblocks = (g.tq + kBq - 1) / kBq;
  const int64_t work = kBq * std::max<int64_t>(g.tk, 1) * std::max<int64_t>(g.d + g.dv, 1);
  parallel_for(g.bh * qblocks, std::max<int64_t>(1, kParallelGrain / work), [&](int64_t t0, int64_t t1) {
    std::vector<C> qs(kBq * g.d), acc(kBq * g.dv), kt(g.d * kBk), vb(kBk * g.dv);
    C s[kBk], p[kBk], m[kBq], l[kBq];
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t bh = task / qblocks, i0 = (task % qblocks) * kBq, rows = std::min(kBq, g.tq - i0);
      const T* qh = q + bh * g.tq * g.d;
      const T* kh = k + bh * g.tk * g.d;
      const T* vh = v + bh * g.tk * g.dv;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t x = 0; x < g.d; ++x) qs[r * g.d + x] = static_cast<C>(qh[(i0 + r) * g.d + x]) * static_cast<C>(g.scale);
        m[r] = -INFINITY, l[r] = 0;
      }
      std::fill(acc.begin(), acc.end(), C(0));
      const int64_t kend = kernels::attention_key_end(i0 + rows - 1, g.tq, g.tk, g.causal);
      for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
        const int64_t jn = std::min(kBk, g.tk - j0);
        load_transposed(kh, g.d, j0, jn, kt.data());
        for (int64_t jj = 0; jj < jn; ++jj) {
          for (int64_t x = 0; x < g.dv; ++x) vb[jj * g.dv + x] = static_cast<C>(vh[(j0 + jj) * g.dv + x]);
        }
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r;
          const int64_t vis = std::min(jn, kernels::attention_key_end(i, g.tq, g.tk, g.causal) - j0);  // visible keys here
          if (vis <= 0) continue;
          row_scores(&qs[r * g.d], kt.data(), g.d, s);
          g.add_bias(bh, i, j0, vis, s);
          C mx = -INFINITY;
          for (int64_t jj = 0; jj < vis; ++jj) mx = std::max(mx, s[jj]);
          for (int64_t jj = vis; jj < kBk; ++jj) s[jj] = -INFINITY;
          const C m_new = std::max(m[r], mx), base = kernels::attention_softmax_base(m_new);
          const C alpha = m[r] == -INFINITY ? C(0) : exp_c(m[r] - m_new);
          for (int64_t jj = 0; jj < kBk; ++jj) p[jj] = exp_c(s[jj] - base);
          C sum = 0;
          for (int64_t jj = 0; jj < vis; ++jj) sum += p[jj];
          l[r] = l[r] * alpha + sum;
          m[r] = m_new;
          if (g.dropout()) {
            for (int64_t jj = 0; jj < vis; ++jj) p[jj] *= kernels::attention_dropout_factor(g.seed, g.offset, bh * g.tq + i, j0 + jj, g.tk, g.keep);
          }
          C* a = &acc[r * g.dv];
          if (alpha != C(1)) {
            for (int64_t x = 0; x < g.dv; ++x) a[x] *= alpha;
          }
          for (int64_t jj = 0; jj < vis; ++jj) {
            const C pj = p[jj];
            if (pj == C(0)) continue;
            const C* vr = &vb[jj * g.dv];
            for (int64_t x = 0; x < g.dv; ++x) a[x] += pj * vr[x];
          }
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        const C inv = l[r] > 0 ? C(1) / l[r] : C(0);
        T* orow = o + (bh * g.tq + i) * g.dv;
        for (int64_t x = 0; x < g.dv; ++x) orow[x] = static_cast<T>(acc[r * g.dv + x] * inv);
        lse[bh * g.tq + i] = l[r] > 0 ? m[r] + std::log(l[r]) : C(-INFINITY);
      }
    }
  });
}

template <class T> void attention_backward(const KernelCall& c) {
  using C = compute_t<T>;
  const Tensor qkvm[4] = {c.inputs[1], c.inputs[2], c.inputs[3], c.inputs.size() > 6 ? c.inputs[6] : Tensor()};
  const AttnGeom g = geometry(c, qkvm);
  const T* go = static_cast<const T*>(c.inputs[0].data_ptr());
  const T* q = static_cast<const T*>(c.inputs[1].data_ptr());
  const T* k = static_cast<const T*>(c.inputs[2].data_ptr());
  const T* v = static_cast<const T*>(c.inputs[3].data_ptr());
  const T* o = static_cast<const T*>(c.inputs[4].data_ptr());
  const C* lse = static_cast<const C*>(c.inputs[5].data_ptr());
  T* dq = static_cast<T*>(c.outputs[0].data_ptr());
  T* dk = static_cast<T*>(c.outputs[1].data_ptr());
  T* dv = static_cast<T*>(c.outputs[2].data_ptr());
  const C scale = static_cast<C>(g.scale);
  parallel_for(g.bh, 1, [&](int64_t h0, int64_t h1) {
    std::vector<C> dka(g.tk * g.d), dva(g.tk * g.dv), qs(kBq * g.d), dos(kBq * g.dv), dqa(kBq * g.d), kt(g.d * kBk),
        vt(g.dv * kBk), kb(kBk * g.d), delta(kBq);
    C s[kBk], p[kBk], dp[kBk], ds[kBk];
    for (int64_t bh = h0; bh < h1; ++bh) {
      std::fill(dka.begin(), dka.end(), C(0));
      std::fill(dva.begin(), dva.end(), C(0));
      const T* kh = k + bh * g.tk * g.d;
      const T* vh = v + bh * g.tk * g.dv;
      for (int64_t i0 = 0; i0 < g.tq; i0 += kBq) {
        const int64_t rows = std::min(kBq, g.tq - i0);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t row = bh * g.tq + i0 + r;
          C dsum = 0;
          for (int64_t x = 0; x < g.dv; ++x) {
            dos[r * g.dv + x] = static_cast<C>(go[row * g.dv + x]);
            dsum += dos[r * g.dv + x] * static_cast<C>(o[row * g.dv + x]);
          }
          delta[r] = dsum;
          for (int64_t x = 0; x < g.d; ++x) qs[r * g.d + x] = static_cast<C>(q[row * g.d + x]) * scale;
        }
        std::fill(dqa.begin(), dqa.end(), C(0));
        const int64_t kend = kernels::attention_key_end(i0 + rows - 1, g.tq, g.tk, g.causal);
        for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
          const int64_t jn = std::min(kBk, g.tk - j0);
          load_transposed(kh, g.d, j0, jn, kt.data());
          load_transposed(vh, g.dv, j0, jn, vt.data());
          for (int64_t jj = 0; jj < jn; ++jj) {
            for (int64_t x = 0; x < g.d; ++x) kb[jj * g.d + x] = static_cast<C>(kh[(j0 + jj) * g.d + x]);
          }
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = i0 + r, row = bh * g.tq + i;
            const int64_t vis = std::min(jn, kernels::attention_key_end(i, g.tq, g.tk, g.causal) - j0);
            const C lse_i = lse[row];
            if (vis <= 0 || lse_i == C(-INFINITY)) continue;
            row_scores(&qs[r * g.d], kt.data(), g.d, s);
            g.add_bias(bh, i, j0, vis, s);
            row_scores(&dos[r * g.dv], vt.data(), g.dv, dp);
            for (int64_t jj = 0; jj < kBk; ++jj) p[jj] = exp_c(s[jj] - lse_i);
            for (int64_t jj = vis; jj < kBk; ++jj) p[jj] = 0;
            for (int64_t jj = 0; jj < kBk; ++jj) ds[jj] = p[jj] * (dp[jj] - delta[r]);
            if (g.dropout()) {
              for (int64_t jj = 0; jj < vis; ++jj) {
                const C z = kernels::attention_dropout_factor(g.seed, g.offset, row, j0 + jj, g.tk, g.keep);
                ds[jj] = p[jj] * (dp[jj] * z - delta[r]);
                p[jj] *= z;  // from here p is the dropped probability dV sees
              }
            }
            const C* dor = &dos[r * g.dv];
            const C* qr = &qs[r * g.d];
            C* dqr = &dqa[r * g.d];
            for (int64_t jj = 0; jj < vis; ++jj) {
              C* dvr = &dva[(j0 + jj) * g.dv];
              const C pj = p[jj], dsj = ds[jj];
              for (int64_t x = 0; x < g.dv; ++x) dvr[x] += pj * dor[x];
              C* dkr = &dka[(j0 + jj) * g.d];
              const C* kr = &kb[jj * g.d];
              for (int64_t x = 0; x < g.d; ++x) {
                dkr[x] += dsj * qr[x];
                dqr[x] += dsj * kr[x];
              }
            }
          }
        }
        for (int64_t r = 0; r < rows; ++r) {
          T* out = dq + (bh * g.tq + i0 + r) * g.d;
          for (int64_t x = 0; x < g.d; ++x) out[x] = static_cast<T>(dqa[r * g.d + x] * scale);
        }
      }
      for (int64_t n = 0; n < g.tk * g.d; ++n) dk[bh * g.tk * g.d + n] = static_cast<T>(dka[n]);
      for (int64_t n = 0; n < g.tk * g.dv; ++n) dv[bh * g.tk * g.dv + n] = static_cast<T>(dva[n]);
    }
  });
}

template <class T> struct AttnF { void operator()(const KernelCall& c) { attention_forward<T>(c); } };
template <class T> struct AttnB { void operator()(const KernelCall& c) { attention_backward<T>(c); } };
}  // namespace

void register_attention(KernelTable& table) {
  table[OpId::Attention] = &float_dispatch<AttnF>;
  table[OpId::AttentionBackward] = &float_dispatch<AttnB>;
}

TESSERA_CPU_KERNELS_END
