// Creation ops and the Philox RNG: values, determinism across thread counts, and that the
// device produces exactly the numbers of the reference Philox computed here on the host.
#include <cmath>

#include "support/checks.h"
#include "tessera/kernels/philox.h"

using namespace tessera;
using namespace tessera::test;

TEST_CASE("zeros, ones, full, arange, linspace, eye, from_vector") {
  const Device d = device();
  CHECK(zeros({2, 2}, DType::i32, d).to_vector<int32_t>() == std::vector<int32_t>{0, 0, 0, 0});
  CHECK(ones({3}, DType::bf16, d).to_vector<float>() == std::vector<float>{1, 1, 1});
  CHECK(full({2}, 2.5, DType::f16, d).to_vector<float>() == std::vector<float>{2.5f, 2.5f});
  CHECK(full({2}, true, DType::boolean, d).to_vector<bool>() == std::vector<bool>{true, true});
  CHECK(arange(5, DType::i64, d).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(1.0, 2.0, 0.25, DType::f32, d).to_vector<float>() == std::vector<float>{1, 1.25f, 1.5f, 1.75f});
  CHECK(arange(3.0, 0.0, -1.0, DType::f64, d).to_vector<double>() == std::vector<double>{3, 2, 1});
  CHECK(arange(0.0, 0.0, 1.0, DType::f32, d).numel() == 0);
  const auto ls = linspace(0.0, 1.0, 5, DType::f64, d).to_vector<double>();
  CHECK(ls == std::vector<double>{0, 0.25, 0.5, 0.75, 1.0});
  CHECK(eye(2, 3, DType::f32, d).to_vector<float>() == std::vector<float>{1, 0, 0, 0, 1, 0});
  CHECK(from_vector<int8_t>({-1, 2}, {2}, d).dtype() == DType::i8);
  CHECK(scalar_tensor(4, DType::i32, d).dim() == 0);
  TESSERA_CHECK_THROWS_WITH(from_vector<float>({1, 2, 3}, {2, 2}, d), "from_vector: 3 values do not fill shape [2, 2]");
  TESSERA_CHECK_THROWS_WITH(arange(0.0, 1.0, 0.0, DType::f32, d), "arange: step must be nonzero");
}

TEST_CASE("uniform, bernoulli and randint draws equal the reference Philox stream") {
  // Seed and offset with high words set (both halves of each key/counter word pair are used);
  // 1001 elements: whole 8-block runs of the CPU's vectorised Philox and a ragged tail.
  const uint64_t seed = 0x0123456789abcdefULL, offset = (uint64_t{1} << 33) + 7;
  Generator gen(seed);
  gen.set_offset(offset);
  const Tensor u = rand({1001}, DType::f32, device(), &gen);
  CHECK(gen.offset() == offset + 1);
  const auto got = u.to_vector<float>();
  for (int64_t i = 0; i < 1001; ++i) {
    const auto w = kernels::philox_block(seed, offset, static_cast<uint64_t>(i / 4));
    REQUIRE(got[i] == kernels::uniform_from_bits(w.v[i % 4]));
  }
  const auto mask = bernoulli({1001}, 0.3, DType::f32, device(), &gen).to_vector<float>();
  const auto ints = randint(-5, 1000, {1001}, DType::i64, device(), &gen).to_vector<int64_t>();
  for (int64_t i = 0; i < 1001; ++i) {
    const auto wb = kernels::philox_block(seed, offset + 1, static_cast<uint64_t>(i / 4));
    REQUIRE(mask[i] == (kernels::uniform_from_bits(wb.v[i % 4]) < 0.3f ? 1.0f : 0.0f));
    const auto wi = kernels::philox_block(seed, offset + 2, static_cast<uint64_t>(i / 4));
    const uint64_t bits = (static_cast<uint64_t>(wi.v[i % 4]) << 32) | wi.v[(i + 1) % 4];
    REQUIRE(ints[i] == -5 + static_cast<int64_t>(bits % 1005));
  }
}

TEST_CASE("random ops are reproducible, thread-count independent and well distributed") {
  const int64_t n = 200'000;
  const int saved = num_threads();
  set_num_threads(1);
  Generator g1(99);
  const auto n1 = randn({n}, DType::f32, device(), &g1).to_vector<float>();
  const auto i1 = randint(-3, 4, {n}, DType::i64, device(), &g1).to_vector<int64_t>();
  set_num_threads(2);
  Generator g2(99);
  const auto n2 = randn({n}, DType::f32, device(), &g2).to_vector<float>();
  const auto i2 = randint(-3, 4, {n}, DType::i64, device(), &g2).to_vector<int64_t>();
  set_num_threads(0);
  (void)saved;
  CHECK(n1 == n2);
  CHECK(i1 == i2);
  double avg = 0, sq = 0;
  for (float v : n1) avg += v;
  avg /= n;
  for (float v : n1) sq += (v - avg) * (v - avg);
  CHECK(std::fabs(avg) < 0.01);
  CHECK(std::fabs(sq / n - 1.0) < 0.02);
  std::vector<int64_t> hist(7, 0);
  for (int64_t v : i1) {
    REQUIRE(v >= -3);
    REQUIRE(v < 4);
    ++hist[v + 3];
  }
  for (int64_t h : hist) CHECK(std::fabs(static_cast<double>(h) / n - 1.0 / 7) < 0.01);
  Generator g3(5);
  const Tensor mask = bernoulli({n}, 0.3, DType::f32, device(), &g3);
  CHECK(std::fabs(mean(mask).item<double>() - 0.3) < 0.01);
  Generator g4(5);
  const Tensor r = rand({n}, DType::f64, device(), &g4, -2.0, 3.0);
  CHECK(amin(r).item<double>() >= -2.0);
  CHECK(amax(r).item<double>() < 3.0);
}
