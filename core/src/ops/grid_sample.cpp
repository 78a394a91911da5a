// grid_sample (torch.nn.functional.grid_sample, 2-D) over existing ops, so it runs on every
// backend with gradients for the input (through gather) and the grid (through the tap
// weights, which are linear in the sampling position). Follows PyTorch's GridSampler: the
// grid's [-1, 1] is unnormalised to pixel positions (corner pixels' centres, or their outer
// edges), border and reflection padding move the position itself (for bicubic, each tap's),
// and a tap outside the input reads 0.
#include <cmath>

#include "dispatch.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/indexing.h"
#include "tessera/ops/nn.h"

namespace tessera {

namespace {
struct Plane {
  Tensor flat;  // input as [N, C, H * W]
  int64_t n, c, h, w, ho, wo;
};

// Folds `p` into [lo2 / 2, hi2 / 2] by reflection at its ends (PyTorch's reflect_coordinates).
Tensor reflect(const Tensor& p, double lo2, double hi2) {
  if (lo2 == hi2) return zeros_like(p);
  const double lo = lo2 / 2, span = (hi2 - lo2) / 2;
  const Tensor d = abs(sub(p, lo));
  const Tensor extra = tessera::fmod(d, span), flips = floor(div(d, span));
  const Tensor even = eq(tessera::fmod(flips, 2.0), 0.0);
  return where(even, add(extra, lo), sub(span + lo, extra));
}

// The padding mode applied to positions along an axis of `size` pixels.
Tensor pad_position(const Tensor& p, int64_t size, SamplePadding padding, bool align_corners) {
  const double last = static_cast<double>(size - 1);
  if (padding == SamplePadding::border) return clamp(p, 0.0, last);
  if (padding == SamplePadding::reflection) {
    const Tensor r = align_corners ? reflect(p, 0, 2 * last) : reflect(p, -1, 2.0 * static_cast<double>(size) - 1);
    return clamp(r, 0.0, last);
  }
  return p;
}

// input[n, :, y, x] at integer-valued positions y, x ([N, Ho, Wo]); 0 where outside.
Tensor tap(const Plane& pl, const Tensor& y, const Tensor& x) {
  const Tensor inside = logical_and(logical_and(ge(x, 0.0), le(x, static_cast<double>(pl.w - 1))),
                                    logical_and(ge(y, 0.0), le(y, static_cast<double>(pl.h - 1))));
  const Tensor xi = clamp(x, 0.0, static_cast<double>(pl.w - 1)), yi = clamp(y, 0.0, static_cast<double>(pl.h - 1));
  const Tensor index = add(mul(yi, static_cast<double>(pl.w)), xi).to(DType::i64).reshape({pl.n, 1, pl.ho * pl.wo});
  const Tensor v = gather(pl.flat, 2, index.expand({pl.n, pl.c, pl.ho * pl.wo})).reshape({pl.n, pl.c, pl.ho, pl.wo});
  return mul(v, inside.to(pl.flat.dtype()).unsqueeze(1));
}

// Keys' cubic convolution weights (A = -0.75) of the taps at distances 1 + t, t, 1 - t, 2 - t.
std::vector<Tensor> cubic_weights(const Tensor& t) {
  constexpr double a = -0.75;
  auto near = [](const Tensor& d) { return add(mul(mul(sub(mul(d, a + 2), a + 3), d), d), 1.0); };  // |d| <= 1
  auto far = [](const Tensor& d) { return sub(mul(add(mul(sub(mul(d, a), 5 * a), d), 8 * a), d), 4 * a); };  // 1 < |d| < 2
  const Tensor u = sub(1.0, t);
  return {far(add(t, 1.0)), near(t), near(u), far(add(u, 1.0))};
}
}  // namespace

Tensor grid_sample(const Tensor& input, const Tensor& grid, SampleMode mode, SamplePadding padding, bool align_corners) {
  detail::check_defined(input, "grid_sample", "input");
  detail::check_defined(grid, "grid_sample", "grid");
  detail::common_device({&input, &grid}, "grid_sample");
  TESSERA_CHECK(input.dim() == 4 && grid.dim() == 4 && grid.size(3) == 2 && grid.size(0) == input.size(0), "grid_sample",
                "needs input [N, C, H, W] and grid [N, Ho, Wo, 2], got ", shape_str(input.shape()), " and ", shape_str(grid.shape()));
  TESSERA_CHECK(is_floating(input.dtype()) && grid.dtype() == input.dtype(), "grid_sample", "needs floating input and grid of one dtype, got ",
                input.dtype(), " and ", grid.dtype());
  Plane pl{input.reshape({input.size(0), input.size(1), -1}), input.size(0), input.size(1), input.size(2), input.size(3),
           grid.size(1), grid.size(2)};
  // Unnormalise: -1 and 1 are the corner pixels' centres (align_corners) or their outer edges.
  auto pixel = [&](const Tensor& g, int64_t size) {
    const double s = static_cast<double>(size);
    return align_corners ? mul(add(g, 1.0), (s - 1) / 2) : div(sub(mul(add(g, 1.0), s), 1.0), 2.0);
  };
  Tensor x = pixel(grid.select(3, 0), pl.w), y = pixel(grid.select(3, 1), pl.h);
  if (mode == SampleMode::bicubic) {
    const Tensor x0 = floor(x).detach(), y0 = floor(y).detach();
    const std::vector<Tensor> wx = cubic_weights(sub(x, x0)), wy = cubic_weights(sub(y, y0));
    Tensor out;
    for (int i = 0; i < 4; ++i) {
      const Tensor yi = pad_position(add(y0, static_cast<double>(i - 1)), pl.h, padding, align_corners);
      for (int j = 0; j < 4; ++j) {
        const Tensor xj = pad_position(add(x0, static_cast<double>(j - 1)), pl.w, padding, align_corners);
        const Tensor term = mul(tap(pl, yi, xj), mul(wy[static_cast<size_t>(i)], wx[static_cast<size_t>(j)]).unsqueeze(1));
        out = out.defined() ? add(out, term) : term;
      }
    }
    return out;
  }
  x = pad_position(x, pl.w, padding, align_corners);
  y = pad_position(y, pl.h, padding, align_corners);
  if (mode == SampleMode::nearest) return tap(pl, round(y).detach(), round(x).detach());  // round half to even, as PyTorch
  const Tensor x0 = floor(x).detach(), y0 = floor(y).detach();
  const Tensor fx = sub(x, x0).unsqueeze(1), fy = sub(y, y0).unsqueeze(1);
  const Tensor top = add(mul(tap(pl, y0, x0), sub(1.0, fx)), mul(tap(pl, y0, add(x0, 1.0)), fx));
  const Tensor bottom = add(mul(tap(pl, add(y0, 1.0), x0), sub(1.0, fx)), mul(tap(pl, add(y0, 1.0), add(x0, 1.0)), fx));
  return add(mul(top, sub(1.0, fy)), mul(bottom, fy));
}

}  // namespace tessera
