// Masked scaled_dot_product_attention: key-padding, boolean and additive masks through the fused
// kernels (forward and backward) against the materialised reference, on every backend; the mask
// read through its broadcast strides (memory of a key-padding mask stays the unmasked kernel's);
// nn::MultiHeadAttention's key_padding_mask and attn_mask over the same op.
#include "support/checks.h"
#include "support/gradcheck.h"
#include "tessera/nn/attention.h"

using namespace tessera;
using namespace tessera::test;

namespace {
struct Grads {
  Tensor y, dq, dk, dv;
};

template <class F>
Grads run_attention(F&& attend, const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& w) {
  Tensor q = q0.detach().set_requires_grad(), k = k0.detach().set_requires_grad(), v = v0.detach().set_requires_grad();
  const Tensor y = attend(q, k, v);
  sum(mul(y, w)).backward();
  return {y.detach(), q.grad(), k.grad(), v.grad()};
}

/** bool [B, 1, 1, tk]: true for the first lengths[b] keys of sequence b (PyTorch's sdpa convention: true attends). */
Tensor key_padding(const std::vector<int64_t>& lengths, int64_t tk) {
  const Tensor keys = arange(tk, DType::i64, device()).reshape({1, 1, 1, tk});
  const Tensor lens = from_vector(lengths, {static_cast<int64_t>(lengths.size()), 1, 1, 1}).to(device());
  return lt(keys, lens);
}

/** An additive mask of `shape` in [-2, 2] with about a quarter of its entries -inf. */
Tensor additive_mask(const Shape& shape, DType dt, uint64_t seed) {
  const Tensor values = make_input(shape, dt, seed, -2, 2);
  return where(lt(make_input(shape, DType::f32, seed + 1000, 0, 1), 0.25), -INFINITY, values);
}
}  // namespace

TEST_CASE("masked fused attention matches the materialised reference (f32)") {
  // Key padding (one sequence fully padded: its rows are zeros), additive masks with -inf holes,
  // with and without causal, broadcast over batch or heads or both, a 2-D [Tq, Tk] mask, a bool
  // mask over heads only, a rank-3 and a rank-5 query (the latter folds two batch dims).
  struct Case {
    Shape lead;
    int64_t tq, tk, d;
    bool causal;
    std::function<Tensor()> mask;
  };
  const std::vector<Case> cases = {
      {{3, 2},
       77,
       77,
       32,
       false,
       [] {
         return key_padding({77, 40, 0}, 77);
       }},
      {{3, 2},
       45,
       70,
       64,
       true,
       [] {
         return key_padding({70, 13, 66}, 70);
       }},
      {{2, 2},
       50,
       50,
       32,
       false,
       [] {
         return additive_mask({2, 2, 50, 50}, DType::f32, 3);
       }},
      {{2, 2},
       40,
       40,
       64,
       true,
       [] {
         return additive_mask({2, 1, 40, 40}, DType::f32, 4);
       }},
      {{1, 3},
       33,
       65,
       128,
       false,
       [] {
         return additive_mask({33, 65}, DType::f32, 5);
       }},
      {{2, 3},
       20,
       37,
       32,
       false,
       [] {
         return gt(make_input({1, 3, 1, 37}, DType::f32, 6, 0, 1), 0.3);
       }},
      {{2},
       30,
       30,
       32,
       true,
       [] {
         return additive_mask({30, 30}, DType::f32, 7);
       }},
      {{2, 2, 2},
       19,
       23,
       32,
       false,
       [] {
         return additive_mask({2, 1, 2, 1, 23}, DType::f32, 8);
       }},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    CAPTURE(shape_str(c.lead));
    CAPTURE(c.tq);
    CAPTURE(c.tk);
    CAPTURE(c.causal);
    auto shaped = [&](int64_t a, int64_t b) {
      Shape s = c.lead;
      s.insert(s.end(), {a, b});
      return s;
    };
    const Tensor q = make_input(shaped(c.tq, c.d), DType::f32, ++seed, -1, 1), k = make_input(shaped(c.tk, c.d), DType::f32, ++seed, -1, 1);
    const Tensor v = make_input(shaped(c.tk, c.d), DType::f32, ++seed, -1, 1), w = make_input(shaped(c.tq, c.d), DType::f32, ++seed, -1, 1);
    const Tensor mask = c.mask();
    const Grads fused =
        run_attention([&](auto& a, auto& b, auto& e) { return scaled_dot_product_attention(a, b, e, mask, 0.0, c.causal); }, q, k, v, w);
    const Grads ref = run_attention(
        [&](auto& a, auto& b, auto& e) { return scaled_dot_product_attention_reference(a, b, e, mask, 0.0, c.causal); }, q, k, v, w);
    const Tolerance tol{1e-5, 2e-6};
    TESSERA_CHECK_CLOSE(fused.y, to_ref(ref.y), tol);
    TESSERA_CHECK_CLOSE(fused.dq, to_ref(ref.dq), tol);
    TESSERA_CHECK_CLOSE(fused.dk, to_ref(ref.dk), tol);
    TESSERA_CHECK_CLOSE(fused.dv, to_ref(ref.dv), tol);
    // The mask changed the result: it is not ignored.
    CHECK(amax(abs(sub(fused.y, scaled_dot_product_attention(q, k, v, c.causal)))).item<double>() > 1e-3);
  }
}

TEST_CASE("masked fused attention: a fully padded sequence gives zeros and zero gradients") {
  const Tensor q = make_input({2, 2, 9, 32}, DType::f32, 61, -1, 1), k = make_input({2, 2, 12, 32}, DType::f32, 62, -1, 1);
  const Tensor v = make_input({2, 2, 12, 32}, DType::f32, 63, -1, 1), w = make_input({2, 2, 9, 32}, DType::f32, 64, -1, 1);
  const Grads g = run_attention(
      [&](auto& a, auto& b, auto& e) {
        return scaled_dot_product_attention(a, b, e, key_padding({12, 0}, 12));
      },
      q, k, v, w);
  CHECK(amax(abs(g.y.select(0, 1))).item<double>() == 0.0);
  CHECK(amax(abs(g.dq.select(0, 1))).item<double>() == 0.0);
  CHECK(amax(abs(g.dk.select(0, 1))).item<double>() == 0.0);
  CHECK(std::isfinite(amax(abs(g.y)).item<double>()));
  CHECK(amax(abs(g.y.select(0, 0))).item<double>() > 0.0);
}

TEST_CASE("masked fused attention with dropout uses the reference's Bernoulli mask") {
  const Tensor q = make_input({2, 2, 37, 32}, DType::f32, 71, -1, 1), k = make_input({2, 2, 37, 32}, DType::f32, 72, -1, 1);
  const Tensor v = make_input({2, 2, 37, 32}, DType::f32, 73, -1, 1), w = make_input({2, 2, 37, 32}, DType::f32, 74, -1, 1);
  const Tensor mask = additive_mask({2, 1, 37, 37}, DType::f32, 75);
  Generator g1(3), g2(3);
  const Grads fused = run_attention(
      [&](auto& a, auto& b, auto& e) { return scaled_dot_product_attention(a, b, e, mask, 0.25, true, {}, &g1); }, q, k, v, w);
  const Grads ref = run_attention(
      [&](auto& a, auto& b, auto& e) { return scaled_dot_product_attention_reference(a, b, e, mask, 0.25, true, {}, &g2); }, q, k, v, w);
  const Tolerance tol{1e-5, 2e-6};
  TESSERA_CHECK_CLOSE(fused.y, to_ref(ref.y), tol);
  TESSERA_CHECK_CLOSE(fused.dq, to_ref(ref.dq), tol);
  TESSERA_CHECK_CLOSE(fused.dk, to_ref(ref.dk), tol);
  TESSERA_CHECK_CLOSE(fused.dv, to_ref(ref.dv), tol);
}

TEST_CASE("masked f16 and bf16 fused attention match the f32 reference of the same inputs") {
  // On matrix-unit devices (and the emulator) the warp-MMA kernels: a key-padding mask and an
  // additive one, head dims 64 and 128, over several 64-row tiles, causal and not.
  struct Case {
    int64_t tq, tk, d;
    bool causal, padding;
    DType dt;
  };
  const Case cases[] = {{70, 90, 64, false, true, DType::f16},
                        {100, 100, 64, true, false, DType::bf16},
                        {70, 70, 128, true, true, DType::bf16},
                        {50, 80, 32, false, false, DType::f16}};
  uint64_t seed = 200;
  for (const Case& c : cases) {
    CAPTURE(dtype_name(c.dt));
    CAPTURE(c.tq);
    CAPTURE(c.d);
    CAPTURE(c.padding);
    const Tensor q = make_input({2, 2, c.tq, c.d}, c.dt, ++seed, -1, 1), k = make_input({2, 2, c.tk, c.d}, c.dt, ++seed, -1, 1);
    const Tensor v = make_input({2, 2, c.tk, c.d}, c.dt, ++seed, -1, 1), w = make_input({2, 2, c.tq, c.d}, c.dt, ++seed, -1, 1);
    const Tensor mask = c.padding ? key_padding({c.tk, c.tk / 3}, c.tk) : additive_mask({2, 2, c.tq, c.tk}, c.dt, ++seed);
    const Grads fused =
        run_attention([&](auto& a, auto& b, auto& e) { return scaled_dot_product_attention(a, b, e, mask, 0.0, c.causal); }, q, k, v, w);
    const Grads ref =
        run_attention([&](auto& a, auto& b, auto& e) { return scaled_dot_product_attention_reference(a, b, e, mask, 0.0, c.causal); },
                      q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), w.to(DType::f32));
    const Tolerance tol = tolerance_for(c.dt);
    TESSERA_CHECK_CLOSE(fused.y, round_to(to_ref(ref.y), c.dt), tol);
    TESSERA_CHECK_CLOSE(fused.dq, round_to(to_ref(ref.dq), c.dt), Tolerance{tol.rtol, tol.rtol * 4});
    TESSERA_CHECK_CLOSE(fused.dk, round_to(to_ref(ref.dk), c.dt), Tolerance{tol.rtol, tol.rtol * 4});
    TESSERA_CHECK_CLOSE(fused.dv, round_to(to_ref(ref.dv), c.dt), Tolerance{tol.rtol, tol.rtol * 4});
  }
}

TEST_CASE("f64 masked fused attention gradients match central differences; a mask that requires grad gets one") {
  // Small: every central difference is two fused calls (racecheck runs this on the emulator).
  const Tensor q = grad_input({2, 1, 5, 4}, 81), k = grad_input({2, 1, 6, 4}, 82), v = grad_input({2, 1, 6, 3}, 83);
  const Tensor padding = key_padding({6, 2}, 6);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    TESSERA_CHECK_GRAD(
        [&](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], padding, 0.0, causal); }, {q, k, v});
  }
  // A learned position bias [Tq, Tk]: the fused kernels give it no gradient, so it runs the
  // composition, whose gradient is checked here with q, k and v.
  const Tensor bias = grad_input({5, 6}, 84);
  TESSERA_CHECK_GRAD([&](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], in[3], 0.0, true); },
                     {q, k, v, bias});
}

TEST_CASE("a key-padding mask keeps fused attention's memory at the unmasked kernel's") {
  auto peak = [](int64_t t, bool masked) {
    const Tensor q = make_input({2, 1, t, 32}, DType::f32, 91), k = make_input({2, 1, t, 32}, DType::f32, 92);
    const Tensor v = make_input({2, 1, t, 32}, DType::f32, 93);
    const Tensor mask = masked ? key_padding({t, t / 2}, t) : Tensor();
    synchronize(device());
    empty_cache(device());
    const int64_t base = memory_stats(device()).in_use_bytes;
    reset_peak_memory(device());
    {
      Tensor qq = q.detach().set_requires_grad(), kk = k.detach().set_requires_grad(), vv = v.detach().set_requires_grad();
      sum(scaled_dot_product_attention(qq, kk, vv, mask)).backward();
      synchronize(device());
    }
    return static_cast<double>(memory_stats(device()).peak_in_use_bytes - base);
  };
  const double ratio = peak(256, true) / peak(256, false);
  CAPTURE(ratio);
  CHECK(ratio <= 1.2);
}

TEST_CASE("scaled_dot_product_attention rejects a mask that does not fit, naming its shape and dtype") {
  const Tensor q = zeros({2, 3, 4, 8}, DType::f32, device()), k = zeros({2, 3, 5, 8}, DType::f32, device());
  TESSERA_CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, k, zeros({2, 1, 4, 4}, DType::f32, device())),
                            "attn_mask [2, 1, 4, 4] does not broadcast to the scores [2, 3, 4, 5]");
  TESSERA_CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, k, zeros({1, 2, 3, 4, 5}, DType::f32, device())), "does not broadcast");
  TESSERA_CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, k, zeros({4, 5}, DType::i64, device())),
                            "attn_mask must be bool (true = attend) or floating (added to the scores), got int64");
  // Empty query or key axes with a mask: zeros of the right shape, no kernel launched.
  const Tensor none = zeros({2, 3, 0, 8}, DType::f32, device());
  CHECK(scaled_dot_product_attention(none, k, k, zeros({4, 5}, DType::f32, device()).narrow(0, 0, 0)).shape() == Shape{2, 3, 0, 8});
  const Tensor y = scaled_dot_product_attention(q, none, none, zeros({4, 0}, DType::boolean, device()));
  CHECK(y.shape() == Shape{2, 3, 4, 8});
  CHECK(amax(abs(y)).item<double>() == 0.0);
}

TEST_CASE("MultiHeadAttention's key_padding_mask and attn_mask run the fused attention like the composed formula") {
  nn::MultiHeadAttention mha(32, 4);
  mha.to(device());
  const Tensor x = make_input({2, 11, 32}, DType::f32, 301, -1, 1), mem = make_input({2, 13, 32}, DType::f32, 302, -1, 1);
  const Tensor pad = logical_not(key_padding({13, 6}, 13).reshape({2, 13}));    // true = padded, as PyTorch's MHA
  const Tensor blocked = gt(make_input({11, 13}, DType::f32, 303, 0, 1), 0.7);  // true = not allowed, as PyTorch's MHA
  for (bool fused : {true, false}) {
    // Composed by hand from the module's own projections.
    const int64_t h = 4, d = 8;
    auto heads = [&](const Tensor& t, int64_t len) { return t.reshape({2, len, h, d}).permute({0, 2, 1, 3}); };
    const Tensor qh = heads(mha.q_proj->forward(x), 11), kh = heads(mha.k_proj->forward(mem), 13), vh = heads(mha.v_proj->forward(mem), 13);
    Tensor scores = mul(matmul(qh, kh.mT()), 1.0 / std::sqrt(8.0));
    scores = where(pad.reshape({2, 1, 1, 13}), -INFINITY, scores);
    scores = where(blocked, -INFINITY, scores);
    const Tensor want = mha.out_proj->forward(matmul(softmax(scores, -1), vh).permute({0, 2, 1, 3}).reshape({2, 11, 32}));
    set_fused_kernels(fused);
    const Tensor got = mha.forward(x, mem, mem, false, pad, blocked);
    set_fused_kernels(true);
    CAPTURE(fused);
    TESSERA_CHECK_CLOSE(got, to_ref(want), Tolerance{1e-5, 1e-6});
  }
  TESSERA_CHECK_THROWS_WITH(mha.forward(x, mem, mem, false, pad.reshape({2, 1, 13})),
                            "key_padding_mask must be bool [2, 13] (true = padded) or floating (added), got [2, 1, 13]");
}
