// scatter_reduce's prod, amax and amin (their own kernel on every backend): values against a
// loop straight from PyTorch's definition on every numeric dtype, axis, include_self and a
// source wider than the index; NaN; gradients by finite differences, zeros included.
#include <cmath>

#include "support/checks.h"
#include "support/gradcheck.h"

using namespace tessera;
using namespace tessera::test;

namespace {
using V = std::vector<Tensor>;

// out = x; for every index position p: out[p with axis -> index[p]] = f(out[...], src[p]), with
// include_self=false starting each hit position from the first source instead of x.
ref::Ref scatter_reduce_ref(const ref::Ref& x, int64_t axis, const ref::Ref& index, const ref::Ref& src, ScatterReduce r, bool include_self) {
  ref::Ref out = x;
  std::vector<bool> seen(out.v.size(), false);
  for (int64_t i = 0; i < index.numel(); ++i) {
    std::vector<int64_t> p = ref::unravel(i, index.shape);
    const double s = src.v[static_cast<size_t>(ref::ravel(p, src.shape))];
    p[static_cast<size_t>(axis)] = static_cast<int64_t>(index.v[static_cast<size_t>(i)]);
    double& o = out.v[static_cast<size_t>(ref::ravel(p, out.shape))];
    const bool first = !include_self && !seen[static_cast<size_t>(&o - out.v.data())];
    seen[static_cast<size_t>(&o - out.v.data())] = true;
    if (first) o = s;
    else if (r == ScatterReduce::prod) o *= s;
    else if (std::isnan(o) || std::isnan(s)) o = NAN;
    else o = r == ScatterReduce::amax ? std::max(o, s) : std::min(o, s);
  }
  return out;
}
const char* reduce_name(ScatterReduce r) { return r == ScatterReduce::prod ? "prod" : r == ScatterReduce::amax ? "amax" : "amin"; }
}  // namespace

TEST_CASE("scatter_reduce prod, amax and amin match PyTorch's definition on every numeric dtype") {
  std::vector<DType> dtypes = kFloatTypes;
  dtypes.insert(dtypes.end(), kIntTypes.begin(), kIntTypes.end());
  uint64_t seed = 7000;
  // x [4, 5, 3]; the index is narrower than the source off the axis (only its extent takes part).
  for (DType dt : dtypes) {
    for (int64_t axis : {0, 1, 2}) {
      for (ScatterReduce r : {ScatterReduce::prod, ScatterReduce::amax, ScatterReduce::amin}) {
        for (bool include_self : {true, false}) {
          CAPTURE(dtype_name(dt));
          CAPTURE(axis);
          CAPTURE(reduce_name(r));
          CAPTURE(include_self);
          const Shape xs = {4, 5, 3};
          Shape is = {3, 4, 2}, ss = {3, 5, 3};
          is[axis] = 6;  // more positions than the axis has: repeats
          ss[axis] = 7;
          const double lo = dt == DType::u8 ? 0 : -3, hi = 3;
          const Tensor x = make_input(xs, dt, ++seed, lo, hi, Layout::transposed);
          const Tensor src = make_input(ss, dt, ++seed, lo, hi);
          const Tensor index = make_input(is, DType::i64, ++seed, 0, xs[axis] - 0.01);
          const Tensor y = scatter_reduce(x, axis, index, src, r, include_self);
          CHECK(y.dtype() == dt);
          ref::Ref want = scatter_reduce_ref(to_ref(x), axis, to_ref(index), to_ref(src), r, include_self);
          want = round_to(want, dt);
          // A product of up to 7 f16/bf16 factors rounds at each step: a few ulps.
          const Tolerance tol = dt == DType::f16 || dt == DType::bf16 ? Tolerance{2e-2, 1e-3} : tolerance_for(dt);
          TESSERA_CHECK_CLOSE(y, want, tol);
          Tensor inplace = x.clone();
          if (include_self) TESSERA_CHECK_CLOSE(scatter_reduce_(inplace, axis, index, src, r), want, tol);
        }
      }
    }
  }
}

TEST_CASE("scatter_reduce prod, amax and amin on a worked example, with NaN, 0-d tensors and bad input") {
  const Tensor x = arange(0, 12, 1, DType::f32, device()).reshape({3, 4});
  const Tensor src = from_vector<float>({10, 20, 30, 40, 50, 60, 70, 81}, {2, 4}).to(device());
  // Column 1 sends two values to row 0, column 3 two to row 2.
  const Tensor index = from_vector<int64_t>({2, 0, 1, 2, 0, 0, 2, 2}, {2, 4}).to(device());
  CHECK(scatter_reduce(x, 0, index, src, ScatterReduce::amax).to_vector<float>() ==
        std::vector<float>{50, 60, 2, 3, 4, 5, 30, 7, 10, 9, 70, 81});
  CHECK(scatter_reduce(x, 0, index, src, ScatterReduce::amin, false).to_vector<float>() ==
        std::vector<float>{50, 20, 2, 3, 4, 5, 30, 7, 10, 9, 70, 40});
  CHECK(scatter_reduce(x, 0, index, src, ScatterReduce::prod).to_vector<float>() ==
        std::vector<float>{0, 1200, 2, 3, 4, 5, 180, 7, 80, 9, 700, 35640});
  const Tensor with_nan = from_vector<float>({1, NAN, 3}, {3}).to(device());
  const Tensor to_zero = zeros({3}, DType::i64, device());
  CHECK(std::isnan(scatter_reduce(zeros({2}, DType::f32, device()), 0, to_zero, with_nan, ScatterReduce::amax).to_vector<float>()[0]));
  CHECK(std::isnan(scatter_reduce(zeros({2}, DType::f32, device()), 0, to_zero, with_nan, ScatterReduce::amin).to_vector<float>()[0]));
  // 0-d: the single element combines with the single source.
  const Tensor s0 = full({}, 3.0, DType::f32, device());
  CHECK(scatter_reduce(full({}, 2.0, DType::f32, device()), 0, zeros({}, DType::i64, device()), s0, ScatterReduce::prod).item<float>() == 6);
  TESSERA_CHECK_THROWS_WITH(scatter_reduce(x, 0, from_vector<int64_t>({3, 0, 0, 0}, {1, 4}).to(device()), src, ScatterReduce::amax).to_vector<float>(),
                            "scatter_reduce: index 3 is out of range for axis 0 of size 3");
  TESSERA_CHECK_THROWS_WITH(scatter_reduce(x, 0, index.reshape({8}), src, ScatterReduce::prod), "scatter_reduce: input [3, 4], index [8]");
  TESSERA_CHECK_THROWS_WITH(scatter_reduce(gt(x, 1), 0, index, gt(src, 1), ScatterReduce::amax), "scatter_reduce: not supported for dtype bool");
}

TEST_CASE("scatter_reduce prod, amax and amin gradients: ties shared, a lone zero gets the product of the others") {
  const Tensor gi = from_vector<int64_t>({1, 0, 2, 1, 1, 0, 0, 1}, {2, 4}).to(device());
  for (ScatterReduce r : {ScatterReduce::prod, ScatterReduce::amax, ScatterReduce::amin}) {
    for (bool include_self : {true, false}) {
      CAPTURE(reduce_name(r));
      CAPTURE(include_self);
      TESSERA_CHECK_GRAD([&](const V& in) { return scatter_reduce(in[0], 0, gi, in[1], r, include_self); },
                         {grad_input({3, 4}, 31), grad_input({3, 5}, 32)});
    }
  }
  // Zeros: x[0][0] and x[1][1] are the lone zeros of their products; row 0 of column 1 gets two
  // zero sources (every gradient there is 0).
  Tensor x = from_vector<double>({0, 2, 3, 4, 5, 0, 7, 8, 9, 1, 2, 3}, {3, 4}).to(device()).set_requires_grad();
  Tensor s = from_vector<double>({2, 0, 3, 4, 5, 0, 7, 8}, {2, 4}).to(device()).set_requires_grad();
  TESSERA_CHECK_GRAD([&](const V& in) { return scatter_reduce(in[0], 0, gi, in[1], ScatterReduce::prod); }, {x, s});
  // Ties: amax of x = 5 with two sources of 5 shares the gradient three ways.
  Tensor tx = from_vector<double>({5, 1}, {2}).to(device()).set_requires_grad();
  Tensor ts = from_vector<double>({5, 5, 2}, {3}).to(device()).set_requires_grad();
  Tensor y = scatter_reduce(tx, 0, from_vector<int64_t>({0, 0, 1}, {3}).to(device()), ts, ScatterReduce::amax);
  sum(y).backward();
  CHECK(tx.grad().to_vector<double>() == std::vector<double>{1.0 / 3, 0});
  CHECK(ts.grad().to_vector<double>() == std::vector<double>{1.0 / 3, 1.0 / 3, 1});
}
