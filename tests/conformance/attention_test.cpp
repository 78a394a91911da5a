// scaled_dot_product_attention: the fused kernels (forward and recomputing backward) against
// the materialised reference composition, on every backend (and, through the emulated
// backend's schedule matrix, at warp 32 and 64 under forward, reverse and random schedules).
#include "support/checks.h"
#include "support/gradcheck.h"

using namespace tessera;
using namespace tessera::test;

namespace {
struct Grads {
  Tensor y, dq, dk, dv;
};

// Output and gradients of sum(y * w) for one attention call (w: fixed random weights).
template <class F> Grads run_attention(F&& attend, const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& w) {
  Tensor q = q0.detach().set_requires_grad(), k = k0.detach().set_requires_grad(), v = v0.detach().set_requires_grad();
  const Tensor y = attend(q, k, v);
  sum(mul(y, w)).backward();
  return {y.detach(), q.grad(), k.grad(), v.grad()};
}

struct AttnCase {
  int64_t batch, heads, tq, tk, d, dv;
  bool causal;
};
}  // namespace

TEST_CASE("fused attention forward and backward match the materialised reference (f32)") {
  // Lengths off the tiles (16/32/64), head dims 32/64/128, causal and not, cross attention with
  // the bottom-right causal alignment, and queries that see no key at all (tq > tk, causal).
  const AttnCase cases[] = {
      {2, 2, 77, 77, 32, 32, false}, {2, 2, 77, 77, 32, 32, true}, {1, 2, 45, 45, 64, 64, true},  {1, 2, 33, 33, 128, 128, false},
      {1, 1, 70, 70, 128, 128, true}, {1, 2, 5, 70, 64, 64, true},  {1, 2, 40, 19, 32, 32, true},  {2, 1, 17, 29, 24, 40, false},
  };
  uint64_t seed = 1;
  for (const AttnCase& c : cases) {
    CAPTURE(c.tq);
    CAPTURE(c.tk);
    CAPTURE(c.d);
    CAPTURE(c.causal);
    const Tensor q = make_input({c.batch, c.heads, c.tq, c.d}, DType::f32, ++seed, -1, 1);
    const Tensor k = make_input({c.batch, c.heads, c.tk, c.d}, DType::f32, ++seed, -1, 1);
    const Tensor v = make_input({c.batch, c.heads, c.tk, c.dv}, DType::f32, ++seed, -1, 1);
    const Tensor w = make_input({c.batch, c.heads, c.tq, c.dv}, DType::f32, ++seed, -1, 1);
    const double scale = 2.0 / std::sqrt(static_cast<double>(c.d));  // sharper than default: a peakier softmax
    const Grads fused = run_attention([&](auto& a, auto& b, auto& e) { return scaled_dot_product_attention(a, b, e, c.causal, 0.0, scale); }, q, k, v, w);
    const Grads naive =
        run_attention([&](auto& a, auto& b, auto& e) { return scaled_dot_product_attention_reference(a, b, e, c.causal, 0.0, scale); }, q, k, v, w);
    const Tolerance tol{1e-5, 2e-6};
    TESSERA_CHECK_CLOSE(fused.y, to_ref(naive.y), tol);
    TESSERA_CHECK_CLOSE(fused.dq, to_ref(naive.dq), tol);
    TESSERA_CHECK_CLOSE(fused.dk, to_ref(naive.dk), tol);
    TESSERA_CHECK_CLOSE(fused.dv, to_ref(naive.dv), tol);
  }
}

TEST_CASE("fused attention dropout uses the Bernoulli mask of the same generator state") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const Tensor q = make_input({2, 2, 37, 32}, DType::f32, 11, -1, 1), k = make_input({2, 2, 37, 32}, DType::f32, 12, -1, 1);
    const Tensor v = make_input({2, 2, 37, 32}, DType::f32, 13, -1, 1), w = make_input({2, 2, 37, 32}, DType::f32, 14, -1, 1);
    Generator g1(99), g2(99);
    const Grads fused = run_attention([&](auto& a, auto& b, auto& e) { return scaled_dot_product_attention(a, b, e, causal, 0.25, {}, &g1); }, q, k, v, w);
    const Grads naive =
        run_attention([&](auto& a, auto& b, auto& e) { return scaled_dot_product_attention_reference(a, b, e, causal, 0.25, {}, &g2); }, q, k, v, w);
    CHECK(g1.offset() == g2.offset());
    const Tolerance tol{1e-5, 2e-6};
    TESSERA_CHECK_CLOSE(fused.y, to_ref(naive.y), tol);
    TESSERA_CHECK_CLOSE(fused.dq, to_ref(naive.dq), tol);
    TESSERA_CHECK_CLOSE(fused.dk, to_ref(naive.dk), tol);
    TESSERA_CHECK_CLOSE(fused.dv, to_ref(naive.dv), tol);
    // Dropout changed something: the no-dropout output differs.
    CHECK(amax(abs(sub(fused.y, scaled_dot_product_attention(q, k, v, causal)))).item<double>() > 1e-2);
  }
}

TEST_CASE("f64 fused attention gradients match central differences, with and without dropout") {
  for (double p : {0.0, 0.3}) {
    for (bool causal : {false, true}) {
      CAPTURE(p);
      CAPTURE(causal);
      const Tensor q = grad_input({1, 2, 6, 5}, 21), k = grad_input({1, 2, 7, 5}, 22), v = grad_input({1, 2, 7, 3}, 23);
      // A fresh generator per evaluation: every call draws the same mask.
      TESSERA_CHECK_GRAD(
          [&](const std::vector<Tensor>& in) {
            Generator gen(5);
            return scaled_dot_product_attention(in[0], in[1], in[2], causal, p, {}, &gen);
          },
          {q, k, v});
    }
  }
}

TEST_CASE("f16 and bf16 fused attention match the f32 reference of the same inputs") {
  // On GPUs with matrix units (and the emulator) these run the warp-MMA kernels
  // (attention_mma.h): head dims 32/64/128 and a 24 that is not a whole bucket (the element-wise
  // staging path), lengths off the 64-row and 64/32-key tiles and over several of them, causal
  // or not, cross attention with the bottom-right causal alignment (tq > tk: rows that see no
  // key; tq < tk), an input that is a view 2 bytes off a 16-byte boundary (no 16-byte copies),
  // and dropout (the same Bernoulli mask as the reference's from the same generator state).
  // The first three in both dtypes; the rest alternate (they cost most under the emulator's
  // racecheck, which runs this suite within CI's 120 s per test).
  struct Case {
    int64_t tq, tk, d;
    bool causal;
    double dropout;
    bool offset_view;
    std::vector<DType> dtypes;
  };
  const std::vector<DType> both{DType::f16, DType::bf16}, f16{DType::f16}, bf16{DType::bf16};
  const Case cases[] = {{50, 50, 64, true, 0, false, both},   {37, 37, 32, false, 0, false, both},    {70, 70, 128, true, 0, false, both},
                        {150, 150, 64, true, 0, false, bf16}, {200, 70, 64, true, 0, false, f16},     {70, 200, 32, true, 0, false, bf16},
                        {90, 90, 24, true, 0, false, f16},    {130, 130, 128, false, 0, false, bf16}, {100, 100, 64, true, 0, true, f16},
                        {80, 80, 64, true, 0.2, false, bf16}};
  uint64_t seed = 30;
  for (const Case& c : cases)
    for (DType dt : c.dtypes) {
      CAPTURE(dtype_name(dt));
      CAPTURE(c.tq);
      CAPTURE(c.tk);
      CAPTURE(c.d);
      CAPTURE(c.causal);
      CAPTURE(c.dropout);
      CAPTURE(c.offset_view);
      auto input = [&](int64_t t) {
        const Shape shape{1, 2, t, c.d};
        if (!c.offset_view) return make_input(shape, dt, ++seed, -1, 1);
        const Tensor flat = make_input({2 * t * c.d + 1}, dt, ++seed, -1, 1);
        return flat.narrow(0, 1, 2 * t * c.d).view(shape);  // storage offset of one element
      };
      const Tensor q = input(c.tq), k = input(c.tk), v = input(c.tk), w = input(c.tq);
      const bool causal = c.causal;
      const double p = c.dropout;
      Generator g1(7), g2(7);
      const Grads fused =
          run_attention([&](auto& a, auto& b, auto& e) { return scaled_dot_product_attention(a, b, e, causal, p, {}, &g1); }, q, k, v, w);
      CHECK(fused.y.dtype() == dt);
      CHECK(fused.dq.dtype() == dt);
      const Grads ref =
          run_attention([&](auto& a, auto& b, auto& e) { return scaled_dot_product_attention_reference(a, b, e, causal, p, {}, &g2); },
                        q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), w.to(DType::f32));
      const Tolerance tol = tolerance_for(dt);
      TESSERA_CHECK_CLOSE(fused.y, round_to(to_ref(ref.y), dt), tol);
      TESSERA_CHECK_CLOSE(fused.dq, round_to(to_ref(ref.dq), dt), Tolerance{tol.rtol, tol.rtol * 4});
      TESSERA_CHECK_CLOSE(fused.dk, round_to(to_ref(ref.dk), dt), Tolerance{tol.rtol, tol.rtol * 4});
      TESSERA_CHECK_CLOSE(fused.dv, round_to(to_ref(ref.dv), dt), Tolerance{tol.rtol, tol.rtol * 4});
    }
}

TEST_CASE("fused attention keeps memory linear in T, the reference stores T x T scores") {
  auto peak = [](int64_t t, bool fused) {
    const Tensor q = make_input({1, 1, t, 32}, DType::f32, 41), k = make_input({1, 1, t, 32}, DType::f32, 42);
    const Tensor v = make_input({1, 1, t, 32}, DType::f32, 43);
    synchronize(device());
    empty_cache(device());  // a cached block up to twice a request's size may serve it and count in full
    const int64_t base = memory_stats(device()).in_use_bytes;
    reset_peak_memory(device());
    {
      Tensor qq = q.detach().set_requires_grad(), kk = k.detach().set_requires_grad(), vv = v.detach().set_requires_grad();
      const Tensor y = fused ? scaled_dot_product_attention(qq, kk, vv, true) : scaled_dot_product_attention_reference(qq, kk, vv, true);
      sum(y).backward();
      synchronize(device());
    }
    return memory_stats(device()).peak_in_use_bytes - base;
  };
  const double fused_growth = static_cast<double>(peak(512, true)) / static_cast<double>(peak(128, true));
  const double naive_growth = static_cast<double>(peak(512, false)) / static_cast<double>(peak(128, false));
  CAPTURE(fused_growth);
  CAPTURE(naive_growth);
  CHECK(fused_growth <= 4.5);   // 4x the length: linear (plus rounding of small blocks)
  CHECK(naive_growth >= 10.0);  // quadratic
}

TEST_CASE("scaled_dot_product_attention rejects bad input with the shapes and dtypes") {
  const Tensor q = zeros({2, 3, 4, 8}, DType::f32, device());
  TESSERA_CHECK_THROWS_WITH(scaled_dot_product_attention(q, zeros({2, 3, 5, 7}, DType::f32, device()), zeros({2, 3, 5, 8}, DType::f32, device())),
                            "scaled_dot_product_attention: query [2, 3, 4, 8], key [2, 3, 5, 7] and value [2, 3, 5, 8] do not match");
  TESSERA_CHECK_THROWS_WITH(scaled_dot_product_attention(q, q, q.to(DType::f64)), "expected query, key and value of one floating dtype, got float32, float32, float64");
  TESSERA_CHECK_THROWS_WITH(scaled_dot_product_attention(q, q, q, false, 1.0), "dropout_p must be in [0, 1), got 1");
  TESSERA_CHECK_THROWS_WITH(scaled_dot_product_attention(zeros({4}, DType::f32, device()), q, q), "of one rank >= 2");
  // No keys: zeros, and zero gradients.
  Tensor qq = make_input({1, 2, 3, 8}, DType::f32, 51).set_requires_grad();
  const Tensor y = scaled_dot_product_attention(qq, zeros({1, 2, 0, 8}, DType::f32, device()), zeros({1, 2, 0, 8}, DType::f32, device()));
  CHECK(amax(abs(y)).item<double>() == 0.0);
  sum(y).backward();
  CHECK(amax(abs(qq.grad())).item<double>() == 0.0);
}
