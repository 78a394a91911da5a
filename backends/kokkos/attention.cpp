// Fused scaled dot-product attention on Kokkos: one team per (batch-head, 16-query tile) for
// the forward and dQ passes, one per (batch-head, 16-key tile) for dK/dV. The team stages the
// other side's 32-row tile in scratch memory between barriers; each team thread then owns whole
// rows (TeamThreadRange), so a row's online-softmax statistics and accumulator never cross
// threads, and the head-dim loops run over vector lanes (ThreadVectorRange). Memory is O(T):
// the forward keeps only the row log-sum-exp, the backward recomputes the probabilities.
#include "../common/attention_bias.h"
#include "common.h"
#include "tessera/kernels/attention.h"
#include "tessera/ops/creation.h"

namespace tessera::kokkos {
namespace {

constexpr int kRows = 16;  // rows a team owns
constexpr int kTile = 32;  // rows of the staged tile

struct Geom {
  int64_t bh, tq, tk, d, dv;
  double scale;
  bool causal;
  float keep;
  uint64_t seed, offset;
  kernels::AttentionBias bias;  // the additive mask, if any (compute dtype)
};

// `mask_at`: the index of the optional mask among the call's inputs.
Geom geom(const KernelCall& c, const Tensor& q, const Tensor& k, const Tensor& v, size_t mask_at) {
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

template <class C> KOKKOS_INLINE_FUNCTION C factor(const Geom& g, int64_t row, int64_t j) {
  return g.keep < 1.0f ? static_cast<C>(kernels::attention_dropout_factor(g.seed, g.offset, row, j, g.tk, g.keep)) : C(1);
}

// Stages rows [r0, r0 + kTile) of src ([n, width]) times `mul` into dst (zeros past n).
template <class T, class C>
KOKKOS_INLINE_FUNCTION void stage(const Team& team, const T* src, int64_t n, int64_t width, int64_t r0, C* dst, C mul) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, static_cast<int64_t>(kTile) * width), [&](int64_t e) {
    const int64_t r = e / width, x = e % width;
    dst[e] = r0 + r < n ? static_cast<C>(src[(r0 + r) * width + x]) * mul : C(0);
  });
}

TeamPolicy scratch_policy(int64_t league, size_t bytes) {
  const int level = bytes <= 48 * 1024 ? 0 : 1;
  return team_policy(league, 1).set_scratch_size(level, Kokkos::PerTeam(bytes));
}
KOKKOS_INLINE_FUNCTION char* scratch(const Team& team, size_t bytes) {
  return static_cast<char*>(bytes <= 48 * 1024 ? team.team_scratch(0).get_shmem(bytes) : team.team_scratch(1).get_shmem(bytes));
}

template <class T> void forward(const KernelCall& c) {
  using C = compute_t<T>;
  const Geom g = geom(c, c.inputs[0], c.inputs[1], c.inputs[2], 3);
  const T *q = ptr<const T>(c.inputs[0]), *k = ptr<const T>(c.inputs[1]), *v = ptr<const T>(c.inputs[2]);
  T* o = ptr<T>(c.outputs[0]);
  C* lse = ptr<C>(c.outputs[1]);
  const int64_t qtiles = (g.tq + kRows - 1) / kRows;
  const size_t bytes = sizeof(C) * (kTile * (g.d + g.dv) + kRows * (g.dv + kTile + 2));
  Kokkos::parallel_for("tessera::attention", scratch_policy(g.bh * qtiles, bytes), KOKKOS_LAMBDA(const Team& team) {
    C* base = reinterpret_cast<C*>(scratch(team, bytes));
    // Row statistics (max m, sum l) sit in scratch, not registers: TeamThreadRange may deal a
    // row to a different thread for each tile.
    C *ks = base, *vs = ks + kTile * g.d, *acc = vs + kTile * g.dv, *ps = acc + kRows * g.dv, *ms = ps + kRows * kTile, *ls = ms + kRows;
    const int64_t bh = team.league_rank() / qtiles, i0 = team.league_rank() % qtiles * kRows;
    const int64_t rows = g.tq - i0 < kRows ? g.tq - i0 : kRows;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kRows * g.dv), [&](int64_t e) { acc[e] = 0; });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kRows), [&](int64_t r) { ms[r] = -INFINITY, ls[r] = 0; });
    const int64_t kend = kernels::attention_key_end(i0 + rows - 1, g.tq, g.tk, g.causal);
    for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
      team.team_barrier();  // the previous tile is consumed before it is overwritten
      stage(team, k + bh * g.tk * g.d, g.tk, g.d, j0, ks, C(1));
      stage(team, v + bh * g.tk * g.dv, g.tk, g.dv, j0, vs, C(1));
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](int64_t r) {
        const int64_t i = i0 + r, row = bh * g.tq + i;
        int64_t vis = kernels::attention_key_end(i, g.tq, g.tk, g.causal) - j0;
        vis = vis < kTile ? vis : kTile;
        vis = vis < g.tk - j0 ? vis : g.tk - j0;
        if (vis <= 0) return;
        const T* qr = q + row * g.d;
        const C* mask = g.bias.defined() ? g.bias.row<C>(bh, i) + j0 * g.bias.s_k : nullptr;
        C* p = ps + r * kTile;
        C mx = -INFINITY;
        for (int64_t jj = 0; jj < vis; ++jj) {
          C s = 0;
          Kokkos::parallel_reduce(Kokkos::ThreadVectorRange(team, g.d), [&](int64_t x, C& a) { a += static_cast<C>(qr[x]) * ks[jj * g.d + x]; }, s);
          p[jj] = s * static_cast<C>(g.scale) + (mask ? mask[jj * g.bias.s_k] : C(0));
          mx = p[jj] > mx ? p[jj] : mx;
        }
        const C m_new = ms[r] > mx ? ms[r] : mx, base = kernels::attention_softmax_base(m_new);
        const C alpha = ms[r] == -INFINITY ? C(0) : kmath::exp(ms[r] - m_new);
        C sum = 0;
        for (int64_t jj = 0; jj < vis; ++jj) {
          p[jj] = kmath::exp(p[jj] - base);
          sum += p[jj];
          p[jj] *= factor<C>(g, row, j0 + jj);
        }
        ms[r] = m_new;
        ls[r] = ls[r] * alpha + sum;
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, g.dv), [&](int64_t x) {
          C a = acc[r * g.dv + x] * alpha;
          for (int64_t jj = 0; jj < vis; ++jj) a += p[jj] * vs[jj * g.dv + x];
          acc[r * g.dv + x] = a;
        });
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](int64_t r) {
      const int64_t row = bh * g.tq + i0 + r;
      const C inv = ls[r] > 0 ? C(1) / ls[r] : C(0);
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, g.dv), [&](int64_t x) { o[row * g.dv + x] = static_cast<T>(acc[r * g.dv + x] * inv); });
      Kokkos::single(Kokkos::PerThread(team), [&] { lse[row] = ls[r] > 0 ? ms[r] + kmath::log(ls[r]) : C(-INFINITY); });
    });
  });
}

// ds for (row i, key j) from a query row (scaled q, dO), a key row (k, v) and the mask's value
// there (0 without one: the callers read it from the plane they took once per team). A functor at
// namespace scope, not a local lambda: a device lambda (KOKKOS_LAMBDA under nvcc) cannot capture
// a variable whose type is local to the enclosing function.
template <class C>
struct GradScore {
  Geom g;
  const C* lse;
  const C* delta;
  KOKKOS_INLINE_FUNCTION void operator()(const Team& team, const C* qr, const C* dor, const C* kr, const C* vr, int64_t row, int64_t j,
                                         C mask, C& p, C& ds) const {
    C s = 0, dp = 0;
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, g.d), [&](int64_t x, C& a) { a += qr[x] * kr[x]; }, s);
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, g.dv), [&](int64_t x, C& a) { a += dor[x] * vr[x]; }, dp);
    s += mask;
    const C z = factor<C>(g, row, j);
    p = kmath::exp(s - lse[row]);
    ds = p * (dp * z - delta[row]);
    p *= z;
  }
};

// dK and dV for a team's 16 keys, walking the query tiles; dQ for its 16 queries, walking the
// key tiles. ds = p (z dp - delta) with z the dropout factor, p = exp(s - lse).
template <class T> void backward(const KernelCall& c) {
  using C = compute_t<T>;
  const Tensor& lse_t = c.inputs[5];
  const Geom g = geom(c, c.inputs[1], c.inputs[2], c.inputs[3], 6);
  const T *go = ptr<const T>(c.inputs[0]), *q = ptr<const T>(c.inputs[1]), *k = ptr<const T>(c.inputs[2]), *v = ptr<const T>(c.inputs[3]),
          *o = ptr<const T>(c.inputs[4]);
  const C* lse = ptr<const C>(lse_t);
  T *dq = ptr<T>(c.outputs[0]), *dk = ptr<T>(c.outputs[1]), *dv = ptr<T>(c.outputs[2]);
  const Tensor delta_t = empty({g.bh * g.tq}, lse_t.dtype(), lse_t.device());
  C* delta = ptr<C>(delta_t);
  const int64_t dvn = g.dv;
  for_n(
      "tessera::attention_delta", g.bh * g.tq,
      KOKKOS_LAMBDA(int64_t row) {
        C s = 0;
        for (int64_t x = 0; x < dvn; ++x) s += static_cast<C>(go[row * dvn + x]) * static_cast<C>(o[row * dvn + x]);
        delta[row] = s;
      },
      dvn);
  const GradScore<C> grad_score{g, lse, delta};
  {  // dK, dV
    const int64_t ktiles = (g.tk + kRows - 1) / kRows;
    const size_t bytes = sizeof(C) * (kTile * (g.d + g.dv) + kRows * (2 * g.d + 2 * g.dv));
    Kokkos::parallel_for("tessera::attention_dkdv", scratch_policy(g.bh * ktiles, bytes), KOKKOS_LAMBDA(const Team& team) {
      C* base = reinterpret_cast<C*>(scratch(team, bytes));
      C *qs = base, *dos = qs + kTile * g.d, *kr_s = dos + kTile * g.dv, *vr_s = kr_s + kRows * g.d, *dka = vr_s + kRows * g.dv,
        *dva = dka + kRows * g.d;
      const int64_t bh = team.league_rank() / ktiles, j0 = team.league_rank() % ktiles * kRows;
      const int64_t keys = g.tk - j0 < kRows ? g.tk - j0 : kRows;
      const C* plane = g.bias.defined() ? g.bias.plane<C>(bh) : nullptr;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kRows * g.d), [&](int64_t e) {
        dka[e] = 0;
        kr_s[e] = j0 + e / g.d < g.tk ? static_cast<C>(k[(bh * g.tk + j0) * g.d + e]) : C(0);
      });
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kRows * g.dv), [&](int64_t e) {
        dva[e] = 0;
        vr_s[e] = j0 + e / g.dv < g.tk ? static_cast<C>(v[(bh * g.tk + j0) * g.dv + e]) : C(0);
      });
      int64_t first = g.causal ? j0 - (g.tk - g.tq) : 0;
      first = first < 0 ? 0 : first;
      for (int64_t i0 = first; i0 < g.tq; i0 += kTile) {
        team.team_barrier();
        stage(team, q + bh * g.tq * g.d, g.tq, g.d, i0, qs, static_cast<C>(g.scale));
        stage(team, go + bh * g.tq * g.dv, g.tq, g.dv, i0, dos, C(1));
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys), [&](int64_t r) {
          const int64_t j = j0 + r;
          for (int64_t ii = 0; ii < kTile && i0 + ii < g.tq; ++ii) {
            const int64_t i = i0 + ii, row = bh * g.tq + i;
            if (j >= kernels::attention_key_end(i, g.tq, g.tk, g.causal) || lse[row] == C(-INFINITY)) continue;
            C p, ds;
            const C mask = plane ? plane[i * g.bias.s_q + j * g.bias.s_k] : C(0);
            grad_score(team, qs + ii * g.d, dos + ii * g.dv, kr_s + r * g.d, vr_s + r * g.dv, row, j, mask, p, ds);
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, g.dv), [&](int64_t x) { dva[r * g.dv + x] += p * dos[ii * g.dv + x]; });
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, g.d), [&](int64_t x) { dka[r * g.d + x] += ds * qs[ii * g.d + x]; });
          }
        });
      }
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys * g.d), [&](int64_t e) { dk[(bh * g.tk + j0) * g.d + e] = static_cast<T>(dka[e]); });
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys * g.dv), [&](int64_t e) { dv[(bh * g.tk + j0) * g.dv + e] = static_cast<T>(dva[e]); });
    });
  }
  {  // dQ
    const int64_t qtiles = (g.tq + kRows - 1) / kRows;
    const size_t bytes = sizeof(C) * (kTile * (g.d + g.dv) + kRows * (2 * g.d + g.dv));
    Kokkos::parallel_for("tessera::attention_dq", scratch_policy(g.bh * qtiles, bytes), KOKKOS_LAMBDA(const Team& team) {
      C* base = reinterpret_cast<C*>(scratch(team, bytes));
      C *ks = base, *vs = ks + kTile * g.d, *qr_s = vs + kTile * g.dv, *dor_s = qr_s + kRows * g.d, *dqa = dor_s + kRows * g.dv;
      const int64_t bh = team.league_rank() / qtiles, i0 = team.league_rank() % qtiles * kRows;
      const int64_t rows = g.tq - i0 < kRows ? g.tq - i0 : kRows;
      const C* plane = g.bias.defined() ? g.bias.plane<C>(bh) : nullptr;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kRows * g.d), [&](int64_t e) {
        dqa[e] = 0;
        qr_s[e] = i0 + e / g.d < g.tq ? static_cast<C>(q[(bh * g.tq + i0) * g.d + e]) * static_cast<C>(g.scale) : C(0);
      });
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kRows * g.dv), [&](int64_t e) {
        dor_s[e] = i0 + e / g.dv < g.tq ? static_cast<C>(go[(bh * g.tq + i0) * g.dv + e]) : C(0);
      });
      const int64_t kend = kernels::attention_key_end(i0 + rows - 1, g.tq, g.tk, g.causal);
      for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
        team.team_barrier();
        stage(team, k + bh * g.tk * g.d, g.tk, g.d, j0, ks, C(1));
        stage(team, v + bh * g.tk * g.dv, g.tk, g.dv, j0, vs, C(1));
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](int64_t r) {
          const int64_t i = i0 + r, row = bh * g.tq + i;
          if (lse[row] == C(-INFINITY)) return;
          const int64_t end = kernels::attention_key_end(i, g.tq, g.tk, g.causal);
          const C* mask_row = plane ? plane + i * g.bias.s_q : nullptr;
          for (int64_t jj = 0; jj < kTile && j0 + jj < end; ++jj) {
            C p, ds;
            const C mask = mask_row ? mask_row[(j0 + jj) * g.bias.s_k] : C(0);
            grad_score(team, qr_s + r * g.d, dor_s + r * g.dv, ks + jj * g.d, vs + jj * g.dv, row, j0 + jj, mask, p, ds);
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, g.d), [&](int64_t x) { dqa[r * g.d + x] += ds * ks[jj * g.d + x]; });
          }
        });
      }
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * g.d), [&](int64_t e) {
        dq[(bh * g.tq + i0) * g.d + e] = static_cast<T>(dqa[e] * static_cast<C>(g.scale));
      });
    });
  }
  Kokkos::fence();  // delta_t is freed on return
}

void attention_fwd(const KernelCall& c) {
  backend_common::dispatch_float(c.inputs[0].dtype(), "scaled_dot_product_attention", [&]<class T>() { forward<T>(c); });
}
void attention_bwd(const KernelCall& c) {
  backend_common::dispatch_float(c.inputs[1].dtype(), "scaled_dot_product_attention_backward", [&]<class T>() { backward<T>(c); });
}
}  // namespace

void register_attention(KernelTable& table) {
  table[OpId::Attention] = &attention_fwd;
  table[OpId::AttentionBackward] = &attention_bwd;
}

}  // namespace tessera::kokkos
