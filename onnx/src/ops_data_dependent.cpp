// ONNX ops whose output shape depends on the input values: Compress, NonMaxSuppression, NonZero
// and Unique. Each decides on the host which elements survive (the ONNX runner needs the values to
// know the shape anyway) and moves the data with index_select on the model's device.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "proto.h"

namespace tessera::onnx {
namespace {
using Out = std::vector<Tensor>;

Tensor index_tensor(const std::vector<int64_t>& v, Device d) { return from_vector(v, {static_cast<int64_t>(v.size())}).to(d); }

// Compress: the slices along `axis` (or the elements of the flattened input) where the 1-D
// condition is true; a condition shorter than the axis leaves the rest out.
Tensor compress(const Ctx& c) {
  const Tensor x = c.in(0);
  const std::vector<double> cond = host_doubles(c.in(1));
  const bool flat = !c.has_attr("axis");
  const Tensor src = flat ? x.reshape({-1}) : x;
  const int64_t axis = flat ? 0 : axis_of(c.attr_i("axis", 0), x.dim(), c.node());
  std::vector<int64_t> keep;
  for (size_t i = 0; i < cond.size() && static_cast<int64_t>(i) < src.size(axis); ++i) {
    if (cond[i] != 0) keep.push_back(static_cast<int64_t>(i));
  }
  return index_select(src, axis, index_tensor(keep, x.device()));
}

// NonZero: the indices of the non-zero elements in row-major order, as int64 [rank, count]
// (NaN counts as non-zero, as numpy's nonzero).
Tensor nonzero(const Ctx& c) {
  const Tensor x = c.in(0);
  const std::vector<double> v = host_doubles(x);
  const Shape& s = x.shape();
  const auto rank = static_cast<int64_t>(s.size());
  std::vector<int64_t> hits;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != 0 || v[i] != v[i]) hits.push_back(static_cast<int64_t>(i));
  }
  const auto count = static_cast<int64_t>(hits.size());
  std::vector<int64_t> out(static_cast<size_t>(rank * count));
  for (int64_t k = 0; k < count; ++k) {
    int64_t rem = hits[static_cast<size_t>(k)];
    for (int64_t a = rank - 1; a >= 0; --a) {
      out[static_cast<size_t>(a * count + k)] = rem % s[static_cast<size_t>(a)];
      rem /= s[static_cast<size_t>(a)];
    }
  }
  return from_vector(out, {rank, count}).to(c.device());
}

// Intersection over union of two boxes given as (y1, x1, y2, x2) corners in any order, or as
// (x center, y center, width, height).
double iou(const double* a, const double* b, bool center) {
  auto corners = [center](const double* p, double& y0, double& x0, double& y1, double& x1) {
    if (center) {
      x0 = p[0] - p[2] / 2, x1 = p[0] + p[2] / 2, y0 = p[1] - p[3] / 2, y1 = p[1] + p[3] / 2;
    } else {
      y0 = std::min(p[0], p[2]), y1 = std::max(p[0], p[2]), x0 = std::min(p[1], p[3]), x1 = std::max(p[1], p[3]);
    }
  };
  double ay0, ax0, ay1, ax1, by0, bx0, by1, bx1;
  corners(a, ay0, ax0, ay1, ax1);
  corners(b, by0, bx0, by1, bx1);
  const double ih = std::max(0.0, std::min(ay1, by1) - std::max(ay0, by0)), iw = std::max(0.0, std::min(ax1, bx1) - std::max(ax0, bx0));
  const double inter = ih * iw, uni = (ay1 - ay0) * (ax1 - ax0) + (by1 - by0) * (bx1 - bx0) - inter;
  return inter <= 0 || uni <= 0 ? 0.0 : inter / uni;
}

// NonMaxSuppression: per batch and class, the boxes by descending score (ties: lower index
// first), each kept unless its IoU with a kept one exceeds the threshold; a score must exceed
// score_threshold. Output rows (batch, class, box), int64.
Tensor non_max_suppression(const Ctx& c) {
  const Tensor boxes_t = c.in(0), scores_t = c.in(1);
  TESSERA_CHECK(boxes_t.dim() == 3 && boxes_t.size(2) == 4 && scores_t.dim() == 3 && scores_t.size(0) == boxes_t.size(0) &&
                    scores_t.size(2) == boxes_t.size(1),
                "onnx", "NonMaxSuppression needs boxes [B, N, 4] and scores [B, C, N], got ", shape_str(boxes_t.shape()), " and ",
                shape_str(scores_t.shape()));
  const int64_t max_out = c.has(2) && c.in(2).numel() > 0 ? static_cast<int64_t>(c.scalar(2)) : 0;
  const double iou_max = c.has(3) && c.in(3).numel() > 0 ? c.scalar(3) : 0.0;
  const bool has_floor = c.has(4) && c.in(4).numel() > 0;
  const double score_floor = has_floor ? c.scalar(4) : 0.0;
  const bool center = c.attr_i("center_point_box", 0) != 0;
  const std::vector<double> boxes = host_doubles(boxes_t), scores = host_doubles(scores_t);
  const int64_t nb = boxes_t.size(0), n = boxes_t.size(1), nc = scores_t.size(1);
  std::vector<int64_t> rows;
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t k = 0; k < nc; ++k) {
      const double* s = scores.data() + (b * nc + k) * n;
      std::vector<int64_t> order;
      for (int64_t i = 0; i < n; ++i) {
        if (!has_floor || s[i] > score_floor) order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(), [s](int64_t i, int64_t j) { return s[i] > s[j]; });
      std::vector<int64_t> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        const double* bi = boxes.data() + (b * n + i) * 4;
        const bool clear = std::none_of(kept.begin(), kept.end(), [&](int64_t j) { return iou(bi, boxes.data() + (b * n + j) * 4, center) > iou_max; });
        if (clear) kept.push_back(i);
      }
      for (int64_t i : kept) rows.insert(rows.end(), {b, k, i});
    }
  }
  return from_vector(rows, {static_cast<int64_t>(rows.size() / 3), 3}).to(c.device());
}

// Unique: distinct elements (or slices along `axis`), sorted or in order of first appearance,
// with the first index of each, every element's position in the result, and the counts.
Out unique(const Ctx& c) {
  const Tensor x = c.in(0);
  const bool flat = !c.has_attr("axis"), sorted = c.attr_i("sorted", 1) != 0;
  const Tensor src = flat ? x.reshape({-1}) : x;
  const int64_t axis = flat ? 0 : axis_of(c.attr_i("axis", 0), x.dim(), c.node());
  const int64_t n = src.size(axis);
  // Each slice along the axis as a row of doubles (exact for every dtype Tessera's ONNX tests use).
  const Tensor rows_t = src.dim() == 1 ? src.reshape({n, 1}) : src.transpose(0, axis).reshape({n, -1});
  const std::vector<double> v = host_doubles(rows_t);
  const size_t w = n ? v.size() / static_cast<size_t>(n) : 0;
  auto row = [&](int64_t i) { return std::vector<double>(v.begin() + i * w, v.begin() + (i + 1) * w); };
  std::vector<int64_t> first;  // the first index of each distinct row, in order of appearance
  std::vector<int64_t> inverse(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto it = std::find_if(first.begin(), first.end(), [&](int64_t j) { return row(j) == row(i); });
    inverse[static_cast<size_t>(i)] = it - first.begin();
    if (it == first.end()) first.push_back(i);
  }
  std::vector<int64_t> rank(first.size());
  std::iota(rank.begin(), rank.end(), 0);
  if (sorted) std::stable_sort(rank.begin(), rank.end(), [&](int64_t a, int64_t b) { return row(first[a]) < row(first[b]); });
  std::vector<int64_t> pos(first.size()), picked, counts(first.size(), 0);
  for (size_t r = 0; r < rank.size(); ++r) pos[static_cast<size_t>(rank[r])] = static_cast<int64_t>(r), picked.push_back(first[rank[r]]);
  for (int64_t& k : inverse) k = pos[static_cast<size_t>(k)], ++counts[static_cast<size_t>(k)];
  const Device d = x.device();
  return Out{index_select(src, axis, index_tensor(picked, d)), index_tensor(picked, d), index_tensor(inverse, d), index_tensor(counts, d)};
}
}  // namespace

void register_data_dependent_ops(OpTable& t) {
  t["Compress"] = {[](const Ctx& c) { return Out{compress(c)}; }, {}};
  t["NonMaxSuppression"] = {[](const Ctx& c) { return Out{non_max_suppression(c)}; }, {}};
  t["NonZero"] = {[](const Ctx& c) { return Out{nonzero(c)}; }, {}};
  t["Unique"] = {&unique, {}};
}

}  // namespace tessera::onnx
