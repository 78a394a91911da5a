// sort / topk (the bitonic network) and cumprod / cummax / cummin (doubling scans) against
// std::stable_sort and sequential loops on the host, NaN and ties included, and their gradients.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "support/checks.h"
#include "support/gradcheck.h"

using namespace tessera;
using namespace tessera::test;

namespace {
using V = std::vector<Tensor>;

// Stable ascending/descending order of each row of a host matrix [rows, n] (NaN largest).
std::vector<int64_t> host_order(const std::vector<float>& x, int64_t rows, int64_t n, bool descending) {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    auto key = [&](int64_t i) { return x[static_cast<size_t>(r * n + i)]; };
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
      const float u = key(a), v = key(b);
      if (std::isnan(u) || std::isnan(v)) return descending ? std::isnan(u) && !std::isnan(v) : !std::isnan(u) && std::isnan(v);
      return descending ? u > v : u < v;
    });
    out.insert(out.end(), idx.begin(), idx.end());
  }
  return out;
}
}  // namespace

TEST_CASE("sort is stable, puts NaN last (first descending) and matches std::stable_sort for any length") {
  for (int64_t n : {1, 2, 5, 16, 37}) {
    CAPTURE(n);
    // Few distinct values, so ties are common.
    const Tensor x = floor(mul(make_input({3, n}, DType::f32, static_cast<uint64_t>(n), -3, 3), 2.0)).to(device());
    const std::vector<float> hx = x.to_vector<float>();
    for (bool descending : {false, true}) {
      const ValuesIndices s = sort(x, 1, descending);
      const std::vector<int64_t> want = host_order(hx, 3, n, descending);
      CHECK(s.indices.to_vector<int64_t>() == want);
      std::vector<float> values;
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t i = 0; i < n; ++i) values.push_back(hx[static_cast<size_t>(r * n + want[static_cast<size_t>(r * n + i)])]);
      CHECK(s.values.to_vector<float>() == values);
    }
  }
  const Tensor special = from_vector<float>({3, NAN, 1, 3, -INFINITY, 1}, {6}).to(device());
  CHECK(sort(special).indices.to_vector<int64_t>() == std::vector<int64_t>{4, 2, 5, 0, 3, 1});
  CHECK(sort(special, 0, true).indices.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 3, 2, 5, 4});
  // Integers, along the first axis of a matrix.
  const Tensor ints = from_vector<int32_t>({5, -1, 2, 7, 5, 0, -3, 7}, {4, 2}).to(device());
  const ValuesIndices si = sort(ints, 0);
  CHECK(si.values.to_vector<int32_t>() == std::vector<int32_t>{-3, -1, 2, 0, 5, 7, 5, 7});
  CHECK(si.indices.to_vector<int64_t>() == std::vector<int64_t>{3, 0, 1, 2, 0, 1, 2, 3});
  TESSERA_CHECK_GRAD([](const V& in) { return sort(in[0], 1).values; }, {grad_input({2, 7}, 3)});
  TESSERA_CHECK_THROWS_WITH(sort(ones({3}, DType::boolean, device())), "sort: not supported for dtype bool");
  // argsort: sort's indices, int64, stable, no gradient.
  CHECK(argsort(special).to_vector<int64_t>() == std::vector<int64_t>{4, 2, 5, 0, 3, 1});
  CHECK(argsort(special, 0, true).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 3, 2, 5, 4});
  CHECK(argsort(ints, 0).to_vector<int64_t>() == si.indices.to_vector<int64_t>());
  CHECK(argsort(grad_input({5}, 4)).dtype() == DType::i64);
  CHECK_FALSE(argsort(grad_input({5}, 4)).requires_grad());
  TESSERA_CHECK_THROWS_WITH(argsort(ones({3}, DType::boolean, device())), "argsort: not supported for dtype bool");
}

TEST_CASE("topk gives the k largest or smallest in order, the lower index first among ties") {
  const Tensor x = from_vector<float>({4, 9, 1, 9, 4, 7, 0, 2, 2, 8, 8, 1}, {2, 6}).to(device());
  const ValuesIndices big = topk(x, 3, 1);
  CHECK(big.values.to_vector<float>() == std::vector<float>{9, 9, 7, 8, 8, 2});
  CHECK(big.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 3, 5, 3, 4, 1});
  const ValuesIndices small = topk(x, 2, -1, false);
  CHECK(small.values.to_vector<float>() == std::vector<float>{1, 4, 0, 1});
  CHECK(small.indices.to_vector<int64_t>() == std::vector<int64_t>{2, 0, 0, 5});
  CHECK(topk(x, 0, 1).values.shape() == Shape{2, 0});
  TESSERA_CHECK_GRAD([](const V& in) { return topk(in[0], 2, 0).values; }, {grad_input({5, 3}, 4)});
  TESSERA_CHECK_THROWS_WITH(topk(x, 7, 1), "topk: k 7 is out of range for 6 elements along axis 1");
}

TEST_CASE("cumprod, cummax and cummin match sequential scans, NaN and ties as PyTorch") {
  const Tensor x = from_vector<float>({2, -1, 0.5f, 3, 0, 4, -2, 1.5f, 1, 1, -1}, {11}).to(device());
  std::vector<float> want;
  float acc = 1;
  for (float v : x.to_vector<float>()) want.push_back(acc *= v);
  CHECK(cumprod(x, 0).to_vector<float>() == want);
  const Tensor m = make_input({3, 9}, DType::f32, 5).to(device());
  const std::vector<float> hm = m.to_vector<float>();
  std::vector<float> rows;
  for (int r = 0; r < 3; ++r) {
    float p = 1;
    for (int i = 0; i < 9; ++i) rows.push_back(p *= hm[static_cast<size_t>(r * 9 + i)]);
  }
  TESSERA_CHECK_CLOSE(cumprod(m, 1), ref::Ref{{3, 9}, std::vector<double>(rows.begin(), rows.end())}, Tolerance{1e-5, 1e-6});
  TESSERA_CHECK_GRAD([](const V& in) { return cumprod(in[0], 1); }, {grad_input({2, 6}, 6, 0.5, 1.5)});
  // Integers and booleans multiply in int64 (like cumsum, and PyTorch): no i32 overflow at 2^31.
  const Tensor ints = from_vector<int32_t>({1 << 16, 1 << 16, 2, -3}, {4}).to(device());
  CHECK(cumprod(ints, 0).dtype() == DType::i64);
  CHECK(cumprod(ints, 0).to_vector<int64_t>() == std::vector<int64_t>{1 << 16, int64_t{1} << 32, int64_t{1} << 33, -(int64_t{3} << 33)});
  CHECK(cumsum(ints, 0).dtype() == DType::i64);
  const Tensor flags = from_vector<int32_t>({1, 1, 0, 1}, {4}).to(DType::boolean).to(device());
  CHECK(cumprod(flags, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0, 0});

  const Tensor y = from_vector<float>({1, 3, 2, 3, NAN, 5, 0}, {7}).to(device());
  const ValuesIndices mx = cummax(y, 0);
  const std::vector<float> mv = mx.values.to_vector<float>();
  CHECK(std::vector<float>(mv.begin(), mv.begin() + 4) == std::vector<float>{1, 3, 3, 3});
  CHECK((std::isnan(mv[4]) && std::isnan(mv[5]) && std::isnan(mv[6])));
  CHECK(mx.indices.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1, 3, 4, 4, 4});  // the last index reaching the max
  const ValuesIndices mn = cummin(from_vector<int64_t>({2, 1, 1, 3, 0}, {5}).to(device()), 0);
  CHECK(mn.values.to_vector<int64_t>() == std::vector<int64_t>{2, 1, 1, 1, 0});
  CHECK(mn.indices.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 2, 4});
  TESSERA_CHECK_GRAD([](const V& in) { return cummax(in[0], 0).values; }, {grad_input({6, 2}, 7)});
}
