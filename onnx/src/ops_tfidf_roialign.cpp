// Two ONNX ops evaluated on the host, one row or region at a time: TfIdfVectorizer (n-gram counts
// of integer token rows, with skips, weighted TF / IDF / TFIDF) and RoiAlign (average or max of
// bilinear samples over each region's bins, as ONNX Runtime computes them).
#include <algorithm>
#include <cmath>
#include <map>

#include "proto.h"

namespace tessera::onnx {
namespace {
using Out = std::vector<Tensor>;

// TfIdfVectorizer over integer tokens: pool_int64s holds the n-grams by length (ngram_counts[n-1]
// is where those of length n start), ngram_indexes maps the i-th n-gram to its output column.
// For each skip s in [0, max_skip_count] the n-grams take every (s + 1)-th token; unigrams are
// counted in the first pass only.
Tensor tfidf(const Ctx& c) {
  const Tensor x = c.in(0);
  if (!c.has_attr("pool_int64s")) unsupported(c.node(), "pool_strings (string tokens)");
  TESSERA_CHECK(x.dim() == 1 || x.dim() == 2, "onnx", "TfIdfVectorizer expects [C] or [N, C] tokens, got ", shape_str(x.shape()));
  const int64_t min_n = c.attr_i("min_gram_length", 1), max_n = c.attr_i("max_gram_length", 1), skips = c.attr_i("max_skip_count", 0);
  const std::vector<int64_t> pool = c.attr_ints("pool_int64s"), counts = c.attr_ints("ngram_counts"),
                             indexes = c.attr_ints("ngram_indexes");
  const std::vector<double> weights = c.attr_floats("weights");
  const std::string mode = c.attr_s("mode", "TF");
  TESSERA_CHECK(min_n >= 1 && max_n >= min_n && skips >= 0 && mode != "" && !indexes.empty(), "onnx", "TfIdfVectorizer: bad gram lengths ",
                min_n, "..", max_n, ", skips ", skips, " or ngram_indexes");
  std::map<std::vector<int64_t>, int64_t> column;  // n-gram -> output column
  size_t gram = 0;
  for (size_t len = 1; len <= counts.size(); ++len) {
    const size_t begin = static_cast<size_t>(counts[len - 1]), end = len < counts.size() ? static_cast<size_t>(counts[len]) : pool.size();
    TESSERA_CHECK(begin <= end && end <= pool.size() && (end - begin) % len == 0, "onnx",
                  "TfIdfVectorizer: ngram_counts do not fit pool_int64s");
    for (size_t at = begin; at < end; at += len, ++gram) {
      TESSERA_CHECK(gram < indexes.size(), "onnx", "TfIdfVectorizer: fewer ngram_indexes than n-grams in the pool");
      column[std::vector<int64_t>(pool.begin() + static_cast<int64_t>(at), pool.begin() + static_cast<int64_t>(at + len))] = indexes[gram];
    }
  }
  const int64_t width = *std::max_element(indexes.begin(), indexes.end()) + 1;
  const int64_t rows = x.dim() == 2 ? x.size(0) : 1, len = x.size(-1);
  const std::vector<int64_t> tokens = x.to(kCPU).to(DType::i64).contiguous().to_vector<int64_t>();
  std::vector<double> out(static_cast<size_t>(rows * width), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* row = tokens.data() + r * len;
    double* y = out.data() + r * width;
    for (int64_t s = 0; s <= skips; ++s) {
      const int64_t from_n = s == 0 ? min_n : std::max<int64_t>(min_n, 2);
      for (int64_t i = 0; i < len; ++i) {
        std::vector<int64_t> g;
        for (int64_t n = 1; n <= max_n && i + (n - 1) * (s + 1) < len; ++n) {
          g.push_back(row[i + (n - 1) * (s + 1)]);
          if (n < from_n) continue;
          const auto it = column.find(g);
          if (it != column.end()) y[it->second] += 1.0;
        }
      }
    }
    for (int64_t k = 0; k < width; ++k) {
      double& v = y[k];
      const double w = static_cast<size_t>(k) < weights.size() ? weights[static_cast<size_t>(k)] : 1.0;
      if (mode == "IDF") v = v > 0 ? w : 0.0;
      else if (mode == "TFIDF") v *= w;
    }
  }
  Shape shape = x.dim() == 2 ? Shape{rows, width} : Shape{width};
  return from_vector(out, shape).to(DType::f32).to(c.device());
}

// RoiAlign(X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R]) -> [R, C, oh, ow].
Tensor roi_align(const Ctx& c) {
  const Tensor x = c.in(0);
  TESSERA_CHECK(x.dim() == 4 && c.in(1).dim() == 2 && c.in(1).size(1) == 4, "onnx", "RoiAlign expects X [N, C, H, W] and rois [R, 4], got ",
                shape_str(x.shape()), ", ", shape_str(c.in(1).shape()));
  const int64_t n = x.size(0), ch = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t oh = c.attr_i("output_height", 1), ow = c.attr_i("output_width", 1), ratio = c.attr_i("sampling_ratio", 0);
  const double scale = c.attr_f("spatial_scale", 1.0);
  const bool half_pixel = c.attr_s("coordinate_transformation_mode", c.opset() >= 16 ? "half_pixel" : "output_half_pixel") == "half_pixel";
  const bool is_max = c.attr_s("mode", "avg") == "max";
  const std::vector<double> data = host_doubles(x), rois = host_doubles(c.in(1));
  const std::vector<int64_t> batch = c.ints(2);
  const int64_t r_count = c.in(1).size(0);
  TESSERA_CHECK(static_cast<int64_t>(batch.size()) == r_count, "onnx", "RoiAlign: ", batch.size(), " batch indices for ", r_count, " rois");
  std::vector<double> out(static_cast<size_t>(r_count * ch * oh * ow), 0.0);
  const double offset = half_pixel ? 0.5 : 0.0;
  for (int64_t r = 0; r < r_count; ++r) {
    const int64_t b = batch[static_cast<size_t>(r)];
    TESSERA_CHECK(b >= 0 && b < n, "onnx", "RoiAlign: batch index ", b, " out of range for ", n, " images");
    const double* roi = rois.data() + r * 4;
    const double x0 = roi[0] * scale - offset, y0 = roi[1] * scale - offset;
    double rw = roi[2] * scale - offset - x0, rh = roi[3] * scale - offset - y0;
    if (!half_pixel) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
    const double bh = rh / static_cast<double>(oh), bw = rw / static_cast<double>(ow);
    const int64_t gh = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rh / static_cast<double>(oh)));
    const int64_t gw = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rw / static_cast<double>(ow)));
    const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
    for (int64_t cc = 0; cc < ch; ++cc) {
      const double* plane = data.data() + (b * ch + cc) * h * w;
      for (int64_t py = 0; py < oh; ++py) {
        for (int64_t px = 0; px < ow; ++px) {
          double acc = 0.0;
          bool first = true;
          for (int64_t iy = 0; iy < gh; ++iy) {
            for (int64_t ix = 0; ix < gw; ++ix) {
              double yy = y0 + static_cast<double>(py) * bh + (static_cast<double>(iy) + 0.5) * bh / static_cast<double>(gh);
              double xx = x0 + static_cast<double>(px) * bw + (static_cast<double>(ix) + 0.5) * bw / static_cast<double>(gw);
              double v = 0.0;
              if (!(yy < -1.0 || yy > static_cast<double>(h) || xx < -1.0 || xx > static_cast<double>(w))) {
                yy = std::max(yy, 0.0), xx = std::max(xx, 0.0);
                int64_t yl = static_cast<int64_t>(yy), xl = static_cast<int64_t>(xx), yh, xh;
                if (yl >= h - 1) yh = yl = h - 1, yy = static_cast<double>(yl);
                else yh = yl + 1;
                if (xl >= w - 1) xh = xl = w - 1, xx = static_cast<double>(xl);
                else xh = xl + 1;
                const double ly = yy - static_cast<double>(yl), lx = xx - static_cast<double>(xl), hy = 1.0 - ly, hx = 1.0 - lx;
                const double p[4] = {hy * hx * plane[yl * w + xl], hy * lx * plane[yl * w + xh], ly * hx * plane[yh * w + xl],
                                     ly * lx * plane[yh * w + xh]};
                v = is_max ? std::max({p[0], p[1], p[2], p[3]}) : p[0] + p[1] + p[2] + p[3];
              }
              acc = is_max ? (first ? v : std::max(acc, v)) : acc + v;
              first = false;
            }
          }
          out[static_cast<size_t>(((r * ch + cc) * oh + py) * ow + px)] = is_max ? acc : acc / count;
        }
      }
    }
  }
  return from_vector(out, {r_count, ch, oh, ow}).to(x.dtype()).to(c.device());
}
}  // namespace

void register_tfidf_roialign_ops(OpTable& t) {
  t["TfIdfVectorizer"] = {[](const Ctx& c) { return Out{tfidf(c)}; }, {}};
  t["RoiAlign"] = {[](const Ctx& c) { return Out{roi_align(c)}; }, {}};
}

}  // namespace tessera::onnx
