// ONNX Resize (opsets 10 to 13), the deprecated Upsample, and GridSample (tessera::grid_sample). Resizing is separable, so each
// resized axis is done in turn: every output coordinate is mapped back to the input
// (coordinate_transformation_mode), its taps -- 2 for nearest and linear, 4 for cubic -- are
// gathered with index_select and blended with weights computed on the host in double, the way
// the ONNX reference implementation computes them (onnx/backend/test/case/node/resize.py):
// a fractional position's ratio lies in (0, 1], so a whole position takes the right tap of the
// pair left of it, and taps outside the input repeat the edge (or, with exclude_outside, drop
// out and the others are renormalised). Runs on any backend: only index_select, mul and add.
#include <algorithm>
#include <cmath>

#include "proto.h"

namespace tessera::onnx {
namespace {
using Out = std::vector<Tensor>;

struct ResizeMode {
  std::string mode = "nearest";           // nearest | linear | cubic
  std::string coord = "half_pixel";       // coordinate_transformation_mode
  std::string nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;             // tf_crop_and_resize, outside the region of interest
};

// Weights of the taps for a position whose distance past its left tap is `ratio` in (0, 1].
std::vector<double> tap_weights(const ResizeMode& m, double ratio) {
  if (m.mode == "nearest") {
    if (ratio == 1.0) return {0, 1};
    if (m.nearest == "round_prefer_ceil") return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
    if (m.nearest == "floor") return {1, 0};
    if (m.nearest == "ceil") return {0, 1};
    return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};  // round_prefer_floor
  }
  if (m.mode == "linear") return {1 - ratio, ratio};
  // Keys' cubic convolution with coefficient A at distances 1 + r, r, 1 - r, 2 - r.
  const double a = m.cubic_a, r = ratio, q = 1 - ratio;
  return {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a, ((a + 2) * r - (a + 3)) * r * r + 1,
          ((a + 2) * q - (a + 3)) * q * q + 1, ((a * (q + 1) - 5 * a) * (q + 1) + 8 * a) * (q + 1) - 4 * a};
}

// The input position of output coordinate o; sets `outside` for tf_crop_and_resize positions
// outside the input.
double source_position(const ResizeMode& m, int64_t o, int64_t in, double scale, double roi_lo, double roi_hi, bool& outside) {
  const double out_width = scale * static_cast<double>(in);  // unrounded, as in the reference
  const double x = static_cast<double>(o), last = static_cast<double>(in - 1);
  outside = false;
  if (m.coord == "align_corners") return out_width == 1 ? 0.0 : x * last / (out_width - 1);
  if (m.coord == "asymmetric") return x / scale;
  if (m.coord == "pytorch_half_pixel") return out_width == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
  if (m.coord == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  if (m.coord == "tf_crop_and_resize") {
    double p = out_width == 1 ? (roi_hi - roi_lo) * last / 2 : x * (roi_hi - roi_lo) * last / (out_width - 1);
    p += roi_lo * last;
    outside = p < 0 || p > last;
    return p;
  }
  return (x + 0.5) / scale - 0.5;  // half_pixel
}

Tensor resize_axis(const Tensor& x, int64_t axis, int64_t out, double scale, const ResizeMode& m, double roi_lo, double roi_hi) {
  const int64_t in = x.size(axis);
  const int taps = m.mode == "cubic" ? 4 : 2;
  std::vector<std::vector<int64_t>> index(taps, std::vector<int64_t>(static_cast<size_t>(out)));
  std::vector<std::vector<double>> weight(taps, std::vector<double>(static_cast<size_t>(out)));
  std::vector<uint8_t> outside(static_cast<size_t>(out), 0);
  for (int64_t o = 0; o < out; ++o) {
    bool off = false;
    const double p = source_position(m, o, in, scale, roi_lo, roi_hi, off);
    outside[static_cast<size_t>(o)] = off;
    const double fl = std::floor(p);
    const double ratio = p == fl ? 1.0 : p - fl;
    const int64_t left = static_cast<int64_t>(fl) - (p == fl ? 1 : 0);
    std::vector<double> w = tap_weights(m, ratio);
    const int64_t first = left - (taps / 2 - 1);
    if (m.exclude_outside) {
      double total = 0;
      for (int j = 0; j < taps; ++j) {
        if (first + j < 0 || first + j >= in) w[static_cast<size_t>(j)] = 0;
        total += w[static_cast<size_t>(j)];
      }
      for (double& v : w) v /= total;
    }
    for (int j = 0; j < taps; ++j) {
      index[j][static_cast<size_t>(o)] = std::clamp<int64_t>(first + j, 0, in - 1);
      weight[j][static_cast<size_t>(o)] = w[static_cast<size_t>(j)];
    }
  }
  Shape along(static_cast<size_t>(x.dim()), 1);
  along[static_cast<size_t>(axis)] = out;
  Tensor y;
  if (m.mode == "nearest") {  // one tap has weight 1: a pure gather, exact for every dtype
    std::vector<int64_t> pick(static_cast<size_t>(out));
    for (size_t o = 0; o < pick.size(); ++o) pick[o] = weight[0][o] == 1.0 ? index[0][o] : index[1][o];
    y = index_select(x, axis, from_vector(pick, {out}).to(x.device()));
  } else {
    TESSERA_CHECK(is_floating(x.dtype()), "onnx", "Resize mode ", m.mode, " needs a floating input, got ", x.dtype());
    for (int j = 0; j < taps; ++j) {
      const Tensor w = from_vector(weight[j], along).to(x.dtype()).to(x.device());
      const Tensor term = mul(index_select(x, axis, from_vector(index[j], {out}).to(x.device())), w);
      y = j == 0 ? term : add(y, term);
    }
  }
  if (m.coord == "tf_crop_and_resize") {
    std::vector<bool> mask(outside.begin(), outside.end());
    y = where(from_vector(mask, along).to(x.device()), full({}, m.extrapolation, y.dtype(), y.device()), y);
  }
  return y;
}

Tensor resize(const Tensor& x, const std::vector<double>& scales, const std::vector<int64_t>& sizes, const std::vector<double>& roi,
              const ResizeMode& m) {
  Tensor y = x;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const size_t i = static_cast<size_t>(d);
    const int64_t in = x.size(d);
    const double lo = roi.empty() ? 0.0 : roi[i], hi = roi.empty() ? 1.0 : roi[i + static_cast<size_t>(x.dim())];
    int64_t out;
    double scale;
    if (!sizes.empty()) {
      out = sizes[i];
      scale = static_cast<double>(out) / static_cast<double>(in);
    } else {
      scale = scales[i];
      const double span = m.coord == "tf_crop_and_resize" ? hi - lo : 1.0;
      out = static_cast<int64_t>(std::floor(static_cast<double>(in) * span * scale));
    }
    const bool identity = out == in && scale == 1.0 && m.coord != "tf_half_pixel_for_nn" && m.coord != "tf_crop_and_resize";
    if (!identity) y = resize_axis(y, d, out, scale, m, lo, hi);
  }
  return y;
}

bool given(const Ctx& c, size_t i) { return c.has(i) && c.in(i).numel() > 0; }

void check_modes(const ::onnx::NodeProto& n, int64_t) {
  for (const auto& a : n.attribute()) {
    const std::string& s = a.s();
    if (a.name() == "mode" && s != "nearest" && s != "linear" && s != "cubic") unsupported(n, "mode \"" + s + "\"");
    if (a.name() == "nearest_mode" && s != "round_prefer_floor" && s != "round_prefer_ceil" && s != "floor" && s != "ceil")
      unsupported(n, "nearest_mode \"" + s + "\"");
    if (a.name() == "coordinate_transformation_mode" && s != "half_pixel" && s != "pytorch_half_pixel" && s != "align_corners" &&
        s != "asymmetric" && s != "tf_half_pixel_for_nn" && s != "tf_crop_and_resize")
      unsupported(n, "coordinate_transformation_mode \"" + s + "\"");
    if (a.name() == "axes" || a.name() == "keep_aspect_ratio_policy") unsupported(n, "attribute " + a.name());
  }
}
}  // namespace

void register_resize_ops(OpTable& t) {
  t["Resize"] = {[](const Ctx& c) {
                   const Tensor x = c.in(0);
                   ResizeMode m;
                   m.mode = c.attr_s("mode", "nearest");
                   // Opset 10 had no coordinate modes: its positions were x / scale, nearest rounded down.
                   m.coord = c.opset() < 11 ? "asymmetric" : c.attr_s("coordinate_transformation_mode", "half_pixel");
                   m.nearest = c.opset() < 11 ? "floor" : c.attr_s("nearest_mode", "round_prefer_floor");
                   m.cubic_a = c.attr_f("cubic_coeff_a", -0.75);
                   m.exclude_outside = c.attr_i("exclude_outside", 0) != 0;
                   m.extrapolation = c.attr_f("extrapolation_value", 0.0);
                   const size_t scales_at = c.opset() < 11 ? 1 : 2;
                   std::vector<int64_t> sizes;
                   std::vector<double> scales, roi;
                   if (c.opset() >= 11 && given(c, 3)) sizes = c.ints(3);
                   else if (given(c, scales_at)) scales = host_doubles(c.in(scales_at));
                   if (c.opset() >= 11 && m.coord == "tf_crop_and_resize" && given(c, 1)) roi = host_doubles(c.in(1));
                   const size_t rank = static_cast<size_t>(x.dim());
                   TESSERA_CHECK(sizes.size() == rank || scales.size() == rank, "onnx", "Resize needs ", rank,
                                 " scales or sizes (one per axis), got ", scales.size(), " scales and ", sizes.size(), " sizes");
                   TESSERA_CHECK(roi.empty() || roi.size() == 2 * rank, "onnx", "Resize roi needs ", 2 * rank, " values, got ", roi.size());
                   return Out{resize(x, scales, sizes, roi, m)};
                 },
                 &check_modes};
  t["GridSample"] = {[](const Ctx& c) {
                       const std::string mode = c.attr_s("mode", "bilinear"), pad = c.attr_s("padding_mode", "zeros");
                       const SampleMode m = mode == "nearest" ? SampleMode::nearest : mode == "bicubic" ? SampleMode::bicubic : SampleMode::bilinear;
                       const SamplePadding p = pad == "border" ? SamplePadding::border : pad == "reflection" ? SamplePadding::reflection : SamplePadding::zeros;
                       return Out{grid_sample(c.in(0), c.in(1).to(c.in(0).dtype()), m, p, c.attr_i("align_corners", 0) != 0)};
                     },
                     [](const ::onnx::NodeProto& n, int64_t) {
                       for (const auto& a : n.attribute()) {
                         if (a.name() == "mode" && a.s() != "bilinear" && a.s() != "nearest" && a.s() != "bicubic") unsupported(n, "mode \"" + a.s() + "\"");
                         if (a.name() == "padding_mode" && a.s() != "zeros" && a.s() != "border" && a.s() != "reflection")
                           unsupported(n, "padding_mode \"" + a.s() + "\"");
                       }
                     }};
  // Upsample (opsets 7 to 9): scales as an attribute (7) or an input (9), positions x / scale.
  t["Upsample"] = {[](const Ctx& c) {
                     ResizeMode m;
                     m.mode = c.attr_s("mode", "nearest");
                     m.coord = "asymmetric";
                     m.nearest = "floor";
                     const std::vector<double> scales = c.has(1) ? host_doubles(c.in(1)) : c.attr_floats("scales");
                     TESSERA_CHECK(scales.size() == static_cast<size_t>(c.in(0).dim()), "onnx", "Upsample needs one scale per axis, got ",
                                   scales.size());
                     return Out{resize(c.in(0), scales, {}, {}, m)};
                   },
                   &check_modes};
}

}  // namespace tessera::onnx
