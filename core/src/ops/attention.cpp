// scaled_dot_product_attention: checks, the [B.., T, D] -> [BH, T, D] flattening, the fused
// kernel call and its backward, and the materialised reference composition.
#include "tessera/ops/attention.h"

#include <cmath>

#include "dispatch.h"
#include "tessera/autocast.h"
#include "autograd/record.h"
#include "tessera/error.h"
#include "tessera/graph.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/linalg.h"
#include "tessera/ops/reduction.h"
#include "tessera/runtime.h"

namespace tessera {
namespace {
constexpr const char* kOp = "scaled_dot_product_attention";

struct AttnShape {
  Shape lead;  // batch and head dims
  int64_t bh = 1, tq = 0, tk = 0, d = 0, dv = 0;
};

AttnShape check_attention(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p, std::optional<double> scale) {
  for (auto [t, what] : {std::pair{&q, "query"}, {&k, "key"}, {&v, "value"}}) detail::check_defined(*t, kOp, what);
  detail::common_device({&q, &k, &v}, kOp);
  TESSERA_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), kOp, "expected query [..., Tq, D], key [..., Tk, D], value [..., Tk, Dv] of one rank >= 2, got ",
                shape_str(q.shape()), ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  TESSERA_CHECK(is_floating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(), kOp,
                "expected query, key and value of one floating dtype, got ", q.dtype(), ", ", k.dtype(), ", ", v.dtype());
  const int64_t r = q.dim();
  AttnShape s;
  s.lead = Shape(q.shape().begin(), q.shape().end() - 2);
  const Shape klead(k.shape().begin(), k.shape().end() - 2), vlead(v.shape().begin(), v.shape().end() - 2);
  s.tq = q.size(r - 2), s.d = q.size(r - 1), s.tk = k.size(r - 2), s.dv = v.size(r - 1);
  TESSERA_CHECK(klead == s.lead && vlead == s.lead && k.size(r - 1) == s.d && v.size(r - 2) == s.tk, kOp,
                "query ", shape_str(q.shape()), ", key ", shape_str(k.shape()), " and value ", shape_str(v.shape()),
                " do not match (need the same leading dims, key and query of one head dim, key and value of one length)");
  TESSERA_CHECK(dropout_p >= 0 && dropout_p < 1, kOp, "dropout_p must be in [0, 1), got ", dropout_p);
  TESSERA_CHECK(!scale || std::isfinite(*scale), kOp, "scale must be finite, got ", scale.value_or(0));
  for (int64_t n : s.lead) s.bh *= n;
  return s;
}

double resolve_scale(std::optional<double> scale, int64_t d) { return scale ? *scale : (d > 0 ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0); }

Shape with_tail(const Shape& lead, int64_t a, int64_t b) {
  Shape s = lead;
  s.push_back(a);
  s.push_back(b);
  return s;
}

/**
 * The mask as the kernels read it: [B, H, Tq, Tk] in the compute dtype (bool true -> 0, false ->
 * -inf), H the last leading dim and B the rest, with stride 0 on every dim it broadcasts over.
 * Only a mask that broadcasts over some but not all of several batch dims is copied, and then
 * only over those dims (never over Tq or Tk).
 */
Tensor kernel_mask(const Tensor& mask, const AttnShape& s, DType compute) {
  Tensor m = mask.dtype() == DType::boolean ? where(mask, 0.0, full({}, -INFINITY, compute, mask.device())) : mask.to(compute);
  const int64_t lead = static_cast<int64_t>(s.lead.size());
  Shape padded(static_cast<size_t>(lead + 2 - m.dim()), 1);
  padded.insert(padded.end(), m.shape().begin(), m.shape().end());
  m = m.contiguous().reshape(padded);  // the kernels index it with 32-bit row and key strides
  const int64_t heads = lead > 0 ? s.lead.back() : 1, mheads = lead > 0 ? m.size(lead - 1) : 1;
  if (lead > 2) {  // fold the outer batch dims into one, broadcast over them first where the mask has 1
    Shape outer(s.lead.begin(), s.lead.end() - 1);
    outer.insert(outer.end(), {mheads, m.size(-2), m.size(-1)});
    m = m.expand(outer).contiguous();
  }
  m = m.reshape({lead > 1 ? m.numel() / (mheads * m.size(-2) * m.size(-1)) : 1, mheads, m.size(-2), m.size(-1)});
  return m.expand({s.bh / std::max<int64_t>(heads, 1), heads, s.tq, s.tk});
}

void check_mask(const Tensor& mask, const Tensor& q, const AttnShape& s) {
  detail::common_device({&q, &mask}, kOp);
  TESSERA_CHECK(mask.dtype() == DType::boolean || is_floating(mask.dtype()), kOp,
                "attn_mask must be bool (true = attend) or floating (added to the scores), got ", mask.dtype());
  const Shape want = with_tail(s.lead, s.tq, s.tk);
  bool ok = mask.dim() <= static_cast<int64_t>(want.size());
  for (int64_t i = 1; ok && i <= mask.dim(); ++i) {
    const int64_t m = mask.size(-i), w = want[want.size() - static_cast<size_t>(i)];
    ok = m == w || m == 1;
  }
  TESSERA_CHECK(ok, kOp, "attn_mask ", shape_str(mask.shape()), " does not broadcast to the scores ", shape_str(want), " of query ",
                shape_str(q.shape()), " and key [..., ", s.tk, ", ", s.d, "]");
}
}  // namespace

Tensor scaled_dot_product_attention_reference(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& attn_mask,
                                              double dropout_p, bool causal, std::optional<double> scale, Generator* gen) {
  const Tensor q = autocast(q_in, CastPolicy::lower), k = autocast(k_in, CastPolicy::lower), v = autocast(v_in, CastPolicy::lower);
  const AttnShape s = check_attention(q, k, v, dropout_p, scale);
  Tensor scores = mul(matmul(q, k.mT()), resolve_scale(scale, s.d));  // [.., Tq, Tk]
  Tensor no_key;  // [Tq, 1]: queries that see no key (causal with Tq > Tk)
  if (causal) {
    const Tensor qi = add(arange(s.tq, DType::i64, q.device()), s.tk - s.tq).unsqueeze(1);
    const Tensor ki = arange(s.tk, DType::i64, q.device()).unsqueeze(0);
    no_key = lt(qi, 0);
    // Those rows keep their scores (an all -inf row would make softmax NaN) and are zeroed below.
    scores = where(logical_and(gt(ki, qi), ge(qi, 0)), -INFINITY, scores);
  }
  Tensor dead;  // rows the mask leaves without a key: zeros, as the fused kernels
  if (attn_mask.defined()) {
    check_mask(attn_mask, q, s);
    scores = attn_mask.dtype() == DType::boolean ? where(attn_mask, scores, -INFINITY) : add(scores, attn_mask.to(scores.dtype()));
    dead = eq(amax(scores.detach(), {-1}, true), -INFINITY);
    scores = where(dead, 0.0, scores);
  }
  Tensor p = softmax(scores, -1);
  if (causal && s.tq > s.tk) p = where(no_key, 0.0, p);
  if (dead.defined()) p = where(dead, 0.0, p);
  if (dropout_p > 0) {
    const Tensor keep = bernoulli(scores.shape(), 1.0 - dropout_p, p.dtype(), p.device(), gen);
    p = mul(p, mul(keep, 1.0 / (1.0 - dropout_p)));
  }
  return matmul(p, v);
}

Tensor scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p,
                                              std::optional<double> scale, Generator* gen) {
  return scaled_dot_product_attention_reference(q, k, v, Tensor(), dropout_p, causal, scale, gen);
}

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& attn_mask, double dropout_p,
                                    bool causal, std::optional<double> scale, Generator* gen) {
  // The kernels give the mask no gradient: a mask that needs one takes the composition.
  const bool mask_grad = attn_mask.defined() && autograd::needs_grad({&attn_mask});
  if (!fused_kernels() || mask_grad)
    return scaled_dot_product_attention_reference(q_in, k_in, v_in, attn_mask, dropout_p, causal, scale, gen);
  const Tensor q = autocast(q_in, CastPolicy::lower), k = autocast(k_in, CastPolicy::lower), v = autocast(v_in, CastPolicy::lower);
  const AttnShape s = check_attention(q, k, v, dropout_p, scale);
  OpAttrs attrs;
  attrs.scale = resolve_scale(scale, s.d);
  attrs.dropout_p = dropout_p;
  attrs.causal = causal;
  if (dropout_p > 0) {
    TESSERA_CHECK(!detail::graph_capturing(), kOp, "attention dropout cannot be captured in a graph (its Philox seed and offset are "
                  "launch arguments: every replay would draw the same mask)");
    Generator& g = gen ? *gen : default_generator();
    attrs.seed = g.seed();
    attrs.offset = g.next_offset();
  }
  const DType stat_dt = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor bias;  // [B, H, Tq, Tk] with broadcast strides; none when there is nothing to attend
  if (attn_mask.defined()) check_mask(attn_mask, q, s);
  if (attn_mask.defined() && s.bh * s.tq * s.tk > 0) bias = kernel_mask(attn_mask.detach(), s, stat_dt);
  const Tensor q3 = q.detach().contiguous().reshape({s.bh, s.tq, s.d}), k3 = k.detach().contiguous().reshape({s.bh, s.tk, s.d}),
               v3 = v.detach().contiguous().reshape({s.bh, s.tk, s.dv});
  Tensor outs[2] = {empty({s.bh, s.tq, s.dv}, q.dtype(), q.device()), empty({s.bh, s.tq}, stat_dt, q.device())};
  if (s.bh * s.tq * s.dv > 0) {
    if (s.tk == 0) {  // no keys: zero output
      outs[0].fill_(0.0);
      outs[1].fill_(-INFINITY);
    } else {
      const Tensor in[4] = {q3, k3, v3, bias};
      detail::run_kernel(OpId::Attention, q.device(), std::span<const Tensor>(in, bias.defined() ? 4 : 3), outs, attrs);
    }
  }
  Tensor y = outs[0].view(with_tail(s.lead, s.tq, s.dv));
  if (autograd::needs_grad({&q, &k, &v})) {
    autograd::record(
        kOp, {q, k, v}, y,
        [q3, k3, v3, bias, o = outs[0], lse = outs[1], attrs, qs = q.shape(), ks = k.shape(), vs = v.shape()](const Tensor& g) {
          // The kernels write every element of dQ, dK and dV; only an empty batch, query or key
          // axis leaves the gradients to be zero-filled here.
          Tensor grads[3] = {empty(q3.shape(), q3.dtype(), q3.device()), empty(k3.shape(), q3.dtype(), q3.device()),
                             empty(v3.shape(), q3.dtype(), q3.device())};
          if (q3.size(0) > 0 && q3.size(1) > 0 && k3.size(1) > 0) {
            const Tensor in[7] = {g.to(q3.dtype()).contiguous().reshape(o.shape()), q3, k3, v3, o, lse, bias};
            detail::run_kernel(OpId::AttentionBackward, q3.device(), std::span<const Tensor>(in, bias.defined() ? 7 : 6), grads, attrs);
          } else {
            for (Tensor& t : grads) t.zero_();
          }
          return std::vector<Tensor>{grads[0].view(qs), grads[1].view(ks), grads[2].view(vs)};
        });
  }
  return y;
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p,
                                    std::optional<double> scale, Generator* gen) {
  return scaled_dot_product_attention(q, k, v, Tensor(), dropout_p, causal, scale, gen);
}

}  // namespace tessera
