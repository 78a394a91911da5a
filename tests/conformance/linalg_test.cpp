// matmul and linear against the double reference: shapes around the micro-tile edges,
// transposed/strided operands read in place, batch broadcasting, every float dtype,
// integers, K = 0, and every fused activation.
#include <cmath>

#include "support/checks.h"

using namespace tessera;
using namespace tessera::test;

namespace {
Tolerance gemm_tol(DType dt, int64_t k) {
  Tolerance t = tolerance_for(dt);
  t.atol = std::max(t.atol, t.rtol * 2.0 * std::sqrt(static_cast<double>(std::max<int64_t>(k, 1))));
  return t;
}
}  // namespace

TEST_CASE("matmul 2-D over tile-edge sizes and operand layouts") {
  const int64_t sizes[] = {1, 5, 6, 7, 16, 17, 33};
  uint64_t seed = 1;
  for (DType dt : kFloatTypes) {
    for (int64_t m : sizes) {
      for (int64_t n : {1L, 15L, 16L, 17L, 40L}) {
        for (int64_t k : {1L, 7L, 64L, 300L}) {
          for (bool ta : {false, true}) {
            for (bool tb : {false, true}) {
              if (dt != DType::f32 && (m > 7 || k > 64)) continue;  // keep the matrix small
              CAPTURE(dtype_name(dt));
              CAPTURE(m);
              CAPTURE(n);
              CAPTURE(k);
              CAPTURE(ta);
              CAPTURE(tb);
              const Tensor a = ta ? make_input({k, m}, dt, ++seed).mT() : make_input({m, k}, dt, ++seed);
              const Tensor b = tb ? make_input({n, k}, dt, ++seed).mT() : make_input({k, n}, dt, ++seed);
              const Tensor c = matmul(a, b);
              CHECK(c.dtype() == dt);
              TESSERA_CHECK_CLOSE(c, round_to(ref::matmul(to_ref(a), to_ref(b)), dt), gemm_tol(dt, k));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("matmul with 1-D operands, batches and broadcast batch axes") {
  const std::pair<Shape, Shape> cases[] = {
      {{5}, {5}},          {{5}, {5, 3}},          {{4, 5}, {5}},         {{2, 4, 5}, {5, 3}},
      {{4, 5}, {3, 5, 2}}, {{2, 1, 4, 5}, {3, 5, 6}}, {{7, 2, 3}, {7, 3, 4}}, {{3}, {2, 3, 4}},
  };
  uint64_t seed = 300;
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    for (const auto& [sa, sb] : cases) {
      CAPTURE(dtype_name(dt));
      CAPTURE(shape_str(sa));
      CAPTURE(shape_str(sb));
      const Tensor a = make_input(sa, dt, ++seed, -5, 5, Layout::strided);
      const Tensor b = make_input(sb, dt, ++seed, -5, 5, Layout::transposed);
      TESSERA_CHECK_CLOSE(matmul(a, b), round_to(ref::matmul(to_ref(a), to_ref(b)), dt), gemm_tol(dt, 5));
    }
  }
}

TEST_CASE("matmul with an empty inner or outer dimension") {
  const Tensor a = zeros({3, 0}, DType::f32, device()), b = zeros({0, 4}, DType::f32, device());
  const Tensor c = matmul(a, b);
  CHECK(c.shape() == Shape{3, 4});
  CHECK(c.to_vector<float>() == std::vector<float>(12, 0.0f));
  CHECK(matmul(zeros({0, 3}, DType::f32, device()), zeros({3, 4}, DType::f32, device())).shape() == Shape{0, 4});
}

TEST_CASE("a large f32 GEMM crosses several cache blocks") {
  const Tensor a = make_input({301, 517}, DType::f32, 11), b = make_input({517, 260}, DType::f32, 12, -2, 2, Layout::transposed);
  TESSERA_CHECK_CLOSE(matmul(a, b), ref::matmul(to_ref(a), to_ref(b)), gemm_tol(DType::f32, 517));
}

TEST_CASE("a long-K product with few outputs (a weight gradient's shape) matches the reference") {
  // K = 5000 over a 64 x 40 output: the CPU backend splits K into fixed chunks here.
  const Tensor a = make_input({64, 5000}, DType::f32, 21, -1, 1, Layout::transposed), b = make_input({5000, 40}, DType::f32, 22);
  TESSERA_CHECK_CLOSE(matmul(a, b), ref::matmul(to_ref(a), to_ref(b)), gemm_tol(DType::f32, 5000));
  const Tensor w = make_input({40, 5000}, DType::f32, 23), bias = make_input({40}, DType::f32, 24);
  ref::Ref want = ref::matmul(to_ref(a), ref::transpose_last2(to_ref(w)));
  want = ref::map2(want, to_ref(bias), [](double v, double c) { return v + c; });
  want = ref::map(want, [](double v) { return ref::unary("relu", v); });
  TESSERA_CHECK_CLOSE(linear(a, w, bias, Activation::relu), want, gemm_tol(DType::f32, 5000));
}

TEST_CASE("linear fuses bias and every activation") {
  const std::pair<Activation, const char*> acts[] = {{Activation::none, nullptr},      {Activation::relu, "relu"},
                                                     {Activation::gelu, "gelu"},       {Activation::gelu_tanh, "gelu_tanh"},
                                                     {Activation::silu, "silu"},       {Activation::sigmoid, "sigmoid"},
                                                     {Activation::tanh, "tanh"}};
  uint64_t seed = 500;
  for (DType dt : kFloatTypes) {
    for (const auto& [act, name] : acts) {
      for (bool with_bias : {false, true}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(static_cast<int>(act));
        CAPTURE(with_bias);
        const Tensor x = make_input({2, 3, 20}, dt, ++seed, -1, 1, Layout::strided);
        const Tensor w = make_input({19, 20}, dt, ++seed, -1, 1);
        const Tensor b = with_bias ? make_input({19}, dt, ++seed) : Tensor();
        const Tensor y = linear(x, w, b, act);
        CHECK(y.shape() == Shape{2, 3, 19});
        ref::Ref want = ref::matmul(to_ref(x), ref::transpose_last2(to_ref(w)));
        if (with_bias) want = ref::map2(want, to_ref(b), [](double v, double c) { return v + c; });
        if (name) want = ref::map(want, [n = name](double v) { return ref::unary(n, v); });
        TESSERA_CHECK_CLOSE(y, round_to(want, dt), gemm_tol(dt, 20));
      }
    }
  }
}

TEST_CASE("f16 and bf16 GEMMs at tensor-core tile sizes, aligned and ragged, match the f64 reference") {
  // 64 x 64 block tiles of 16 x 8 (warp 32) or 16 x 16 (warp 64) MMA tiles over 32-deep K slabs
  // on the GPU backends: whole tiles, ragged edges in every dimension, several K slabs, batches
  // and transposed operands.
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  const Case cases[] = {{{64, 64}, {64, 64}, false, false}, {{128, 96}, {96, 64}, true, false},
                        {{37, 45}, {45, 29}, false, true},  {{65, 33}, {33, 70}, true, true},
                        {{3, 17, 80}, {80, 40}, false, false}, {{2, 64, 48}, {2, 48, 72}, false, true},
                        // several K slabs of the CPU's AVX512_BF16 kernel, odd K (a half-filled pair), edge tiles
                        {{130, 601}, {601, 300}, false, true}, {{20, 2049}, {2049, 40}, false, false}};
  uint64_t seed = 900;
  for (DType dt : {DType::bf16, DType::f16}) {
    for (const Case& c : cases) {
      CAPTURE(dtype_name(dt));
      CAPTURE(shape_str(c.a));
      CAPTURE(shape_str(c.b));
      CAPTURE(c.ta);
      CAPTURE(c.tb);
      const Tensor a = c.ta ? make_input(c.a, dt, ++seed, -1, 1, Layout::transposed) : make_input(c.a, dt, ++seed, -1, 1);
      const Tensor b = c.tb ? make_input(c.b, dt, ++seed, -1, 1, Layout::transposed) : make_input(c.b, dt, ++seed, -1, 1);
      const Tensor y = matmul(a, b);
      CHECK(y.dtype() == dt);
      TESSERA_CHECK_CLOSE(y, round_to(ref::matmul(to_ref(a), to_ref(b)), dt), gemm_tol(dt, c.a.back()));
    }
    const Tensor x = make_input({70, 96}, dt, ++seed, -1, 1), w = make_input({50, 96}, dt, ++seed, -1, 1);
    const Tensor bias = make_input({50}, dt, ++seed, -1, 1);
    ref::Ref want = ref::matmul(to_ref(x), ref::transpose_last2(to_ref(w)));
    want = ref::map2(want, to_ref(bias), [](double v, double c) { return v + c; });
    want = ref::map(want, [](double v) { return ref::unary("gelu", v); });
    TESSERA_CHECK_CLOSE(linear(x, w, bias, Activation::gelu), round_to(want, dt), gemm_tol(dt, 96));
  }
}
