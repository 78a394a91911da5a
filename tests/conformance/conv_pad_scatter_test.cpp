// The PyTorch forms composed from existing kernels: conv_transpose2d, conv3d, pad in its four
// modes, pooling with ceil_mode, embedding padding_idx, index_add, scatter, scatter_reduce, grid_sample --
// values against loops straight from PyTorch's definitions, gradients by finite differences.
#include <cmath>

#include "reference/nn_reference.h"
#include "support/checks.h"
#include "support/gradcheck.h"

using namespace tessera;
using namespace tessera::test;

namespace {
using V = std::vector<Tensor>;

// y[n, g*og + o, i*s - p + kh*d, ...] += x[n, g*cg + c, i, j] * w[g*cg + c, o, kh, kw]
ref::Ref conv_transpose2d_ref(const ref::Ref& x, const ref::Ref& w, const Shape& out, Size2 s, Size2 p, Size2 d, int64_t groups) {
  ref::Ref y{out, std::vector<double>(static_cast<size_t>(out[0] * out[1] * out[2] * out[3]), 0.0)};
  const int64_t cg = x.shape[1] / groups, og = w.shape[1];
  for (int64_t n = 0; n < x.shape[0]; ++n)
    for (int64_t c = 0; c < x.shape[1]; ++c)
      for (int64_t i = 0; i < x.shape[2]; ++i)
        for (int64_t j = 0; j < x.shape[3]; ++j)
          for (int64_t o = 0; o < og; ++o)
            for (int64_t kh = 0; kh < w.shape[2]; ++kh)
              for (int64_t kw = 0; kw < w.shape[3]; ++kw) {
                const int64_t r = i * s[0] - p[0] + kh * d[0], q = j * s[1] - p[1] + kw * d[1];
                if (r < 0 || q < 0 || r >= out[2] || q >= out[3]) continue;
                const int64_t oc = (c / cg) * og + o;
                y.v[static_cast<size_t>(ref::ravel({n, oc, r, q}, out))] +=
                    x.v[static_cast<size_t>(ref::ravel({n, c, i, j}, x.shape))] * w.v[static_cast<size_t>(ref::ravel({c, o, kh, kw}, w.shape))];
              }
  return y;
}

ref::Ref conv3d_ref(const ref::Ref& x, const ref::Ref& w, Size3 s, Size3 p, Size3 d, int64_t groups) {
  Shape out = {x.shape[0], w.shape[0], 0, 0, 0};
  for (int a = 0; a < 3; ++a) out[2 + a] = (x.shape[2 + a] + 2 * p[a] - d[a] * (w.shape[2 + a] - 1) - 1) / s[a] + 1;
  ref::Ref y{out, std::vector<double>(static_cast<size_t>(out[0] * out[1] * out[2] * out[3] * out[4]), 0.0)};
  const int64_t cg = w.shape[1], og = w.shape[0] / groups;
  for (int64_t i = 0; i < y.numel(); ++i) {
    const auto o = ref::unravel(i, out);
    double acc = 0;
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t a = 0; a < w.shape[2]; ++a)
        for (int64_t b = 0; b < w.shape[3]; ++b)
          for (int64_t e = 0; e < w.shape[4]; ++e) {
            const int64_t z = o[2] * s[0] - p[0] + a * d[0], r = o[3] * s[1] - p[1] + b * d[1], q = o[4] * s[2] - p[2] + e * d[2];
            if (z < 0 || r < 0 || q < 0 || z >= x.shape[2] || r >= x.shape[3] || q >= x.shape[4]) continue;
            acc += x.v[static_cast<size_t>(ref::ravel({o[0], (o[1] / og) * cg + c, z, r, q}, x.shape))] *
                   w.v[static_cast<size_t>(ref::ravel({o[1], c, a, b, e}, w.shape))];
          }
    y.v[static_cast<size_t>(i)] = acc;
  }
  return y;
}
}  // namespace

TEST_CASE("conv_transpose2d matches its definition over stride, padding, output_padding, groups and dilation") {
  struct Case {
    Shape x, w;
    Size2 stride, padding, output_padding, dilation;
    int64_t groups;
  };
  for (const Case& c : {Case{{2, 4, 3, 4}, {4, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 2},
                        Case{{1, 2, 4, 3}, {2, 3, 2, 3}, {1, 2}, {0, 1}, {1, 0}, {2, 1}, 1},  // output_padding under the dilation
                        Case{{1, 3, 1, 1}, {3, 2, 4, 4}, {3, 3}, {0, 0}, {2, 2}, {1, 1}, 1}}) {
    const Tensor x = make_input(c.x, DType::f32, 1).to(device()), w = make_input(c.w, DType::f32, 2).to(device());
    const Tensor b = make_input({c.w[1] * c.groups}, DType::f32, 3).to(device());
    const Tensor y = conv_transpose2d(x, w, b, c.stride, c.padding, c.output_padding, c.groups, c.dilation);
    Shape out = {c.x[0], c.w[1] * c.groups, 0, 0};
    for (int i = 0; i < 2; ++i) out[2 + i] = (c.x[2 + i] - 1) * c.stride[i] - 2 * c.padding[i] + c.dilation[i] * (c.w[2 + i] - 1) + c.output_padding[i] + 1;
    const ref::Ref want = ref::map2(conv_transpose2d_ref(to_ref(x), to_ref(w), out, c.stride, c.padding, c.dilation, c.groups),
                                    ref::Ref{{1, out[1], 1, 1}, to_ref(b).v}, [](double u, double v) { return u + v; });
    TESSERA_CHECK_CLOSE(y, want, Tolerance{1e-4, 1e-4});
    TESSERA_CHECK_GRAD([c](const V& in) { return conv_transpose2d(in[0], in[1], in[2], c.stride, c.padding, c.output_padding, c.groups, c.dilation); },
                       {grad_input(c.x, 4), grad_input(c.w, 5), grad_input({c.w[1] * c.groups}, 6)});
  }
  TESSERA_CHECK_THROWS_WITH(conv_transpose2d(zeros({1, 2, 3, 3}), zeros({3, 2, 3, 3})), "conv_transpose2d: weight [3, 2, 3, 3] needs 2 input channels");
  TESSERA_CHECK_THROWS_WITH(conv_transpose2d(zeros({1, 2, 3, 3}), zeros({2, 2, 3, 3}), Tensor(), {2, 2}, {0, 0}, {2, 0}),
                            "conv_transpose2d: output_padding 2 must be smaller than the stride 2 or the dilation 1");
}

TEST_CASE("conv3d matches its definition and its gradient") {
  const Tensor x = make_input({2, 4, 5, 4, 6}, DType::f32, 7).to(device()), w = make_input({6, 2, 3, 2, 3}, DType::f32, 8).to(device());
  const Size3 s{2, 1, 2}, p{1, 0, 1}, d{1, 2, 1};
  TESSERA_CHECK_CLOSE(conv3d(x, w, Tensor(), s, p, d, 2), conv3d_ref(to_ref(x), to_ref(w), s, p, d, 2), Tolerance{1e-4, 1e-4});
  TESSERA_CHECK_GRAD([](const V& in) { return conv3d(in[0], in[1], in[2], {1, 2, 1}, {1, 1, 0}, {2, 1, 1}); },
                     {grad_input({1, 2, 5, 4, 3}, 9), grad_input({3, 2, 2, 2, 2}, 10), grad_input({3}, 11)});
  TESSERA_CHECK_THROWS_WITH(conv3d(zeros({1, 2, 4, 4}), zeros({1, 2, 1, 1, 1})), "conv3d: expected input [N, C, D, H, W]");
  TESSERA_CHECK_THROWS_WITH(conv3d(zeros({1, 2, 1, 4, 4}), zeros({1, 2, 3, 1, 1})), "conv3d: input [1, 2, 1, 4, 4] is shallower than the kernel");
}

TEST_CASE("pad in constant, reflect, replicate and circular modes, with negative pads cropping") {
  const Tensor x = arange(0, 8, 1, DType::f32, device()).reshape({2, 4});
  auto row = [](const Tensor& t) { return t.select(0, 1).to_vector<float>(); };
  CHECK(row(pad(x, {2, 1}, PadMode::reflect)) == std::vector<float>{6, 5, 4, 5, 6, 7, 6});
  CHECK(row(pad(x, {2, 1}, PadMode::replicate)) == std::vector<float>{4, 4, 4, 5, 6, 7, 7});
  CHECK(row(pad(x, {2, 4}, PadMode::circular)) == std::vector<float>{6, 7, 4, 5, 6, 7, 4, 5, 6, 7});
  CHECK(row(pad(x, {1, -2}, PadMode::constant, 9)) == std::vector<float>{9, 4, 5});
  // Negative pads crop in the other modes too (PyTorch's semantics: indices in the input's own
  // coordinates, so a reflection on the far side still mirrors the whole axis).
  CHECK(row(pad(x, {-1, 2}, PadMode::reflect)) == std::vector<float>{5, 6, 7, 6, 5});
  CHECK(row(pad(x, {2, -1}, PadMode::replicate)) == std::vector<float>{4, 4, 4, 5, 6});
  CHECK(row(pad(x, {-2, 1}, PadMode::circular)) == std::vector<float>{6, 7, 4});
  CHECK(row(pad(x, {-1, -1}, PadMode::reflect)) == std::vector<float>{5, 6});
  TESSERA_CHECK_GRAD([](const V& in) { return pad(in[0], {-1, 2, 1, -1}, PadMode::reflect); }, {grad_input({3, 4}, 26)});
  TESSERA_CHECK_THROWS_WITH(pad(x, {-3, -2}, PadMode::replicate), "pad: replicate padding of -3 and -2 does not fit axis 1 of size 4");
  const Tensor both = pad(x, {1, 0, 1, 1}, PadMode::reflect);  // last axis, then the first
  CHECK(both.shape() == Shape{4, 5});
  CHECK(both.to_vector<float>() == std::vector<float>{5, 4, 5, 6, 7, 1, 0, 1, 2, 3, 5, 4, 5, 6, 7, 1, 0, 1, 2, 3});
  TESSERA_CHECK_GRAD([](const V& in) { return pad(in[0], {2, 1, 1, 1}, PadMode::reflect); }, {grad_input({3, 4}, 12)});
  TESSERA_CHECK_GRAD([](const V& in) { return pad(in[0], {3, 2}, PadMode::circular); }, {grad_input({2, 3}, 13)});
  TESSERA_CHECK_GRAD([](const V& in) { return pad(in[0], {1, -1, 0, 2}, PadMode::constant, 0.5); }, {grad_input({2, 3}, 14)});
  TESSERA_CHECK_THROWS_WITH(pad(x, {4, 0}, PadMode::reflect), "pad: reflect padding of 4 and 0 does not fit axis 1 of size 4");
  TESSERA_CHECK_THROWS_WITH(pad(x, {1, 1, 1, 1, 1, 1}), "pad: needs an even number of pads, at most 4");
}

TEST_CASE("pooling with ceil_mode covers the edge with a partial window, as PyTorch") {
  const Tensor x = arange(0, 25, 1, DType::f32, device()).reshape({1, 1, 5, 5});
  const Tensor mx = max_pool2d(x, {2, 2}, Size2{2, 2}, {0, 0}, {1, 1}, true);
  CHECK(mx.to_vector<float>() == std::vector<float>{6, 8, 9, 16, 18, 19, 21, 23, 24});
  // Average: the last window holds one row/column of the input, and the divisor says so.
  const Tensor av = avg_pool2d(x, {2, 2}, Size2{2, 2}, {0, 0}, true, true);
  CHECK(av.to_vector<float>() == std::vector<float>{3, 5, 6.5, 13, 15, 16.5, 20.5, 22.5, 24});
  // With padding: include_pad counts the padded part of a window but not the part past it.
  const Tensor x4 = arange(0, 16, 1, DType::f32, device()).reshape({1, 1, 4, 4});
  const Tensor inc = avg_pool2d(x4, {3, 3}, Size2{2, 2}, {1, 1}, true, true), exc = avg_pool2d(x4, {3, 3}, Size2{2, 2}, {1, 1}, false, true);
  REQUIRE(inc.shape() == Shape{1, 1, 3, 3});  // floor mode gives 2x2
  CHECK(inc.to_vector<float>()[0] == doctest::Approx((0 + 1 + 4 + 5) / 9.0));
  CHECK(exc.to_vector<float>()[0] == doctest::Approx((0 + 1 + 4 + 5) / 4.0));
  CHECK(inc.to_vector<float>()[8] == doctest::Approx(15 / 4.0));  // the window [3, 5) x [3, 5) within the padded 5 x 5
  CHECK(exc.to_vector<float>()[8] == doctest::Approx(15.0));
  // No partial window needed: the same as floor mode.
  CHECK(max_pool2d(x4, {2, 2}, Size2{2, 2}, {0, 0}, {1, 1}, true).to_vector<float>() == max_pool2d(x4, {2, 2}).to_vector<float>());
  TESSERA_CHECK_GRAD([](const V& in) { return max_pool2d(in[0], {2, 2}, Size2{2, 2}, {0, 0}, {1, 1}, true); }, {grad_input({1, 2, 5, 3}, 15)});
  TESSERA_CHECK_GRAD([](const V& in) { return avg_pool2d(in[0], {3, 3}, Size2{2, 2}, {1, 1}, false, true); }, {grad_input({1, 2, 4, 5}, 16)});
}

TEST_CASE("embedding padding_idx keeps that row out of the gradient") {
  Tensor w = make_input({5, 3}, DType::f32, 17).to(device());
  w.set_requires_grad(true);
  const Tensor idx = from_vector<int64_t>({1, 4, 1, 2, 4}, {5}).to(device());
  sum(embedding(w, idx, -1)).backward();  // -1: row 4
  CHECK(w.grad().to_vector<float>() == std::vector<float>{0, 0, 0, 2, 2, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0});
  CHECK(embedding(w, idx, 4).to_vector<float>() == embedding(w, idx).to_vector<float>());
  TESSERA_CHECK_THROWS_WITH(embedding(w, idx, 5), "embedding: padding_idx 5 is outside the 5 rows");
}

TEST_CASE("index_add, scatter and scatter_reduce follow PyTorch") {
  const Tensor x = arange(0, 12, 1, DType::f32, device()).reshape({3, 4});
  const Tensor src = from_vector<float>({10, 20, 30, 40, 50, 60, 70, 81}, {2, 4}).to(device());
  const Tensor rows = from_vector<int64_t>({2, 0}, {2}).to(device());
  CHECK(index_add(x, 0, rows, src, 0.5).to_vector<float>() == std::vector<float>{25, 31, 37, 43.5, 4, 5, 6, 7, 13, 19, 25, 31});
  // scatter along axis 0: out[index[i][j]][j] = src[i][j] (no index repeats within a column)
  const Tensor distinct = from_vector<int64_t>({2, 0, 1, 2, 0, 1, 2, 0}, {2, 4}).to(device());
  CHECK(scatter(x, 0, distinct, src).to_vector<float>() == std::vector<float>{50, 20, 2, 81, 4, 60, 30, 7, 10, 9, 70, 40});
  // The reductions with repeats: column 1 sends two values to row 0, column 3 two to row 2.
  const Tensor index = from_vector<int64_t>({2, 0, 1, 2, 0, 0, 2, 2}, {2, 4}).to(device());
  CHECK(scatter_reduce(x, 0, index, src, ScatterReduce::sum).to_vector<float>() ==
        std::vector<float>{50, 81, 2, 3, 4, 5, 36, 7, 18, 9, 80, 132});
  CHECK(scatter_reduce(x, 0, index, src, ScatterReduce::mean).to_vector<float>() ==
        std::vector<float>{25, 27, 2, 3, 4, 5, 18, 7, 9, 9, 40, 44});
  CHECK(scatter_reduce(x, 0, index, src, ScatterReduce::mean, false).to_vector<float>() ==
        std::vector<float>{50, 40, 2, 3, 4, 5, 30, 7, 10, 9, 70, 60.5});
  CHECK(scatter_reduce(x, 0, index, src, ScatterReduce::sum, false).to_vector<float>() ==
        std::vector<float>{50, 80, 2, 3, 4, 5, 30, 7, 10, 9, 70, 121});
  const Tensor gi = from_vector<int64_t>({1, 0, 2, 1}, {1, 4}).to(device());
  TESSERA_CHECK_GRAD([gi](const V& in) { return scatter(in[0], 0, gi, in[1]); }, {grad_input({3, 4}, 18), grad_input({1, 4}, 19)});
  TESSERA_CHECK_GRAD([gi](const V& in) { return scatter_reduce(in[0], 0, gi, in[1], ScatterReduce::mean); },
                     {grad_input({3, 4}, 20), grad_input({1, 4}, 21)});
  // include_self = false: an unhit element is x itself (gradient 1), a hit one only the sources'
  // mean (gradient 0). The unhit elements' 0 / 0 divisor used to leak NaN into x's gradient.
  Tensor xs = x.detach().set_requires_grad();
  sum(scatter_reduce(xs, 0, index, src, ScatterReduce::mean, false)).backward();
  CHECK(xs.grad().to_vector<float>() == std::vector<float>{0, 0, 1, 1, 1, 1, 0, 1, 0, 1, 0, 0});
  TESSERA_CHECK_GRAD([gi](const V& in) { return scatter_reduce(in[0], 0, gi, in[1], ScatterReduce::mean, false); },
                     {grad_input({3, 4}, 24), grad_input({1, 4}, 25)});
  TESSERA_CHECK_GRAD([](const V& in) { return index_add(in[0], 1, from_vector<int64_t>({2, 2, 0}, {3}).to(in[0].device()), in[1], 2.0); },
                     {grad_input({2, 3}, 22), grad_input({2, 3}, 23)});
  TESSERA_CHECK_THROWS_WITH(index_add(x, 0, rows, zeros({2, 3}, DType::f32, device())), "index_add: source [2, 3] must match input [3, 4]");
}

TEST_CASE("grid_sample: the identity grid reproduces the input; gradients for input and grid in every mode") {
  const Tensor x = make_input({2, 3, 4, 5}, DType::f64, 41, -1, 1);
  // align_corners: pixel j of W sits at -1 + 2 j / (W - 1).
  const Tensor gx = add(mul(arange(0, 5, 1, DType::f64, device()), 2.0 / 4), -1.0).reshape({1, 1, 5, 1}).expand({2, 4, 5, 1});
  const Tensor gy = add(mul(arange(0, 4, 1, DType::f64, device()), 2.0 / 3), -1.0).reshape({1, 4, 1, 1}).expand({2, 4, 5, 1});
  const Tensor identity = cat({gx, gy}, 3);
  for (SampleMode m : {SampleMode::bilinear, SampleMode::nearest, SampleMode::bicubic}) {
    CAPTURE(static_cast<int>(m));
    TESSERA_CHECK_CLOSE(grid_sample(x, identity, m, SamplePadding::zeros, true), to_ref(x), Tolerance{1e-12, 1e-12});
  }
  for (SampleMode m : {SampleMode::bilinear, SampleMode::bicubic}) {
    for (SamplePadding p : {SamplePadding::zeros, SamplePadding::border, SamplePadding::reflection}) {
      for (bool align : {false, true}) {
        CAPTURE(static_cast<int>(m));
        CAPTURE(static_cast<int>(p));
        CAPTURE(align);
        // Positions past the edges (|g| up to 1.3) exercise the padding.
        TESSERA_CHECK_GRAD([&](const V& in) { return grid_sample(in[0], in[1], m, p, align); },
                           {grad_input({1, 2, 3, 4}, 42), grad_input({1, 2, 3, 2}, 43, -1.3, 1.3)});
      }
    }
  }
  TESSERA_CHECK_THROWS_WITH(grid_sample(x, zeros({2, 4, 5, 3}, DType::f64, device())),
                            "grid_sample: needs input [N, C, H, W] and grid [N, Ho, Wo, 2], got [2, 3, 4, 5] and [2, 4, 5, 3]");
}
