// MultiHeadAttention, LSTM and GRU: scalar references from the definitions, masking
// properties, and finite-difference gradient checks.
#include <cmath>

#include "support/checks.h"
#include "support/gradcheck.h"
#include "tessera/nn/attention.h"
#include "tessera/nn/recurrent.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;

namespace {
Placement f64() { return {DType::f64, device()}; }
double sig(double v) { return 1 / (1 + std::exp(-v)); }
std::vector<double> vec(const Tensor& t) { return t.to_vector<double>(); }
}  // namespace

TEST_CASE("LSTM and GRU match scalar references of their gate equations") {
  manual_seed(4);
  const int64_t in = 2, hid = 3, steps = 4;
  const Tensor x = make_input({steps, 1, in}, DType::f64, 9);
  const auto xs = vec(x);
  {
    LSTM lstm(in, hid, {}, f64());
    auto p = lstm.named_parameters();
    const auto wih = vec(p[0].second), whh = vec(p[1].second), bih = vec(p[2].second), bhh = vec(p[3].second);
    std::vector<double> h(hid, 0), c(hid, 0);
    const auto [out, state] = lstm.forward(x, {});
    const auto got = vec(out);
    for (int64_t t = 0; t < steps; ++t) {
      std::vector<double> g(4 * hid);
      for (int64_t r = 0; r < 4 * hid; ++r) {
        g[r] = bih[r] + bhh[r];
        for (int64_t k = 0; k < in; ++k) g[r] += wih[r * in + k] * xs[t * in + k];
        for (int64_t k = 0; k < hid; ++k) g[r] += whh[r * hid + k] * h[k];
      }
      for (int64_t j = 0; j < hid; ++j) {
        c[j] = sig(g[hid + j]) * c[j] + sig(g[j]) * std::tanh(g[2 * hid + j]);
        h[j] = sig(g[3 * hid + j]) * std::tanh(c[j]);
        CHECK(got[t * hid + j] == doctest::Approx(h[j]).epsilon(1e-12));
      }
    }
    CHECK(vec(state.second)[2] == doctest::Approx(c[2]).epsilon(1e-12));
  }
  {
    GRU gru(in, hid, {}, f64());
    auto p = gru.named_parameters();
    const auto wih = vec(p[0].second), whh = vec(p[1].second), bih = vec(p[2].second), bhh = vec(p[3].second);
    std::vector<double> h(hid, 0);
    const auto got = vec(gru.forward(x, Tensor()).first);
    for (int64_t t = 0; t < steps; ++t) {
      std::vector<double> gi(3 * hid), gh(3 * hid);
      for (int64_t r = 0; r < 3 * hid; ++r) {
        gi[r] = bih[r];
        gh[r] = bhh[r];
        for (int64_t k = 0; k < in; ++k) gi[r] += wih[r * in + k] * xs[t * in + k];
        for (int64_t k = 0; k < hid; ++k) gh[r] += whh[r * hid + k] * h[k];
      }
      std::vector<double> next(hid);
      for (int64_t j = 0; j < hid; ++j) {
        const double r = sig(gi[j] + gh[j]), z = sig(gi[hid + j] + gh[hid + j]);
        const double n = std::tanh(gi[2 * hid + j] + r * gh[2 * hid + j]);
        next[j] = (1 - z) * n + z * h[j];
        CHECK(got[t * hid + j] == doctest::Approx(next[j]).epsilon(1e-12));
      }
      h = next;
    }
  }
}

TEST_CASE("multi-layer, batch_first recurrent modules and their gradients") {
  manual_seed(6);
  LSTM lstm(3, 4, {.num_layers = 2, .batch_first = true}, f64());
  const auto [out, st] = lstm.forward(make_input({2, 5, 3}, DType::f64, 1), {});
  CHECK(out.shape() == Shape{2, 5, 4});
  CHECK(st.first.shape() == Shape{2, 2, 4});
  CHECK(lstm.named_parameters().size() == 8);
  TESSERA_CHECK_GRAD([&](const std::vector<Tensor>& in) { return lstm.forward(in[0], {}).first; }, {grad_input({2, 3, 3}, 2)});
  GRU gru(3, 2, {.num_layers = 2}, f64());
  TESSERA_CHECK_GRAD([&](const std::vector<Tensor>& in) { return gru.forward(in[0], in[1]).first; },
                     {grad_input({3, 2, 3}, 3), grad_input({2, 2, 2}, 4)});
}

TEST_CASE("multi-head attention: reference, causal and padding masks, gradients") {
  manual_seed(8);
  MultiHeadAttention mha(4, 2, true, f64());
  const Tensor x = make_input({2, 3, 4}, DType::f64, 5);
  const Tensor y = mha.forward(x, x, x);
  CHECK(y.shape() == Shape{2, 3, 4});
  // Reference with one head split done by hand through the public linear/softmax ops.
  const Tensor q = mha.q_proj->forward(x), k = mha.k_proj->forward(x), v = mha.v_proj->forward(x);
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < 2; ++h) {
    const Tensor qh = q.narrow(2, 2 * h, 2), kh = k.narrow(2, 2 * h, 2), vh = v.narrow(2, 2 * h, 2);
    heads.push_back(matmul(softmax(div(matmul(qh, kh.mT()), std::sqrt(2.0)), -1), vh));
  }
  TESSERA_CHECK_CLOSE(y, to_ref(mha.out_proj->forward(cat(heads, 2))), Tolerance{1e-12, 1e-12});
  // Causal: changing later positions never changes earlier outputs.
  Tensor x2 = x.clone();
  x2.select(1, 2).fill_(5.0);
  const Tensor c1 = mha.forward(x, x, x, true), c2 = mha.forward(x2, x2, x2, true);
  TESSERA_CHECK_CLOSE(c2.narrow(1, 0, 2), to_ref(c1.narrow(1, 0, 2)), Tolerance{1e-12, 1e-12});
  CHECK(sum(abs(sub(c2.narrow(1, 2, 1), c1.narrow(1, 2, 1)))).item<double>() > 1e-6);
  // Padding: masked keys are ignored.
  const Tensor mask = from_vector<bool>({false, false, true, false, false, true}, {2, 3}).to(device());
  const Tensor m1 = mha.forward(x, x, x, false, mask), m2 = mha.forward(x, x2, x2, false, mask);
  TESSERA_CHECK_CLOSE(m2, to_ref(m1), Tolerance{1e-12, 1e-12});
  TESSERA_CHECK_GRAD([&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0], true); }, {grad_input({1, 3, 4}, 6)});
  TESSERA_CHECK_THROWS_WITH(MultiHeadAttention(5, 2), "MultiHeadAttention: embed_dim 5 must be divisible by num_heads 2");
}
