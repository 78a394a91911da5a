// pad() in PyTorch's four modes, and pooling with ceil_mode, composed from cat, index_select
// and the pooling kernels so they run with gradients on every backend.
#include <cmath>

#include "dispatch.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/indexing.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/shape_ops.h"

namespace tessera {

namespace {
const char* mode_name(PadMode m) {
  switch (m) {
    case PadMode::constant: return "constant";
    case PadMode::reflect: return "reflect";
    case PadMode::replicate: return "replicate";
    case PadMode::circular: return "circular";
  }
  return "?";
}

// Source position of padded position j (from -lo to n + hi - 1) in an axis of size n.
int64_t source_index(PadMode m, int64_t j, int64_t n) {
  switch (m) {
    case PadMode::reflect: return j < 0 ? -j : (j >= n ? 2 * (n - 1) - j : j);
    case PadMode::replicate: return std::clamp<int64_t>(j, 0, n - 1);
    default: return ((j % n) + n) % n;  // circular
  }
}

Tensor pad_constant(Tensor y, int64_t axis, int64_t lo, int64_t hi, double value) {
  const int64_t n = y.size(axis);
  TESSERA_CHECK(-lo - hi <= n, "pad", "negative pads ", lo, " and ", hi, " crop more than the ", n, " elements of axis ", axis);
  if (lo < 0) y = y.narrow(axis, -lo, y.size(axis) + lo);
  if (hi < 0) y = y.narrow(axis, 0, y.size(axis) + hi);
  std::vector<Tensor> parts;
  auto filler = [&](int64_t size) {
    Shape s = y.shape();
    s[static_cast<size_t>(axis)] = size;
    return full(s, value, y.dtype(), y.device());
  };
  if (lo > 0) parts.push_back(filler(lo));
  parts.push_back(y);
  if (hi > 0) parts.push_back(filler(hi));
  return parts.size() == 1 ? y : cat(parts, axis);
}
}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value) {
  detail::check_defined(x, "pad");
  TESSERA_CHECK(pads.size() % 2 == 0 && static_cast<int64_t>(pads.size() / 2) <= x.dim(), "pad", "needs an even number of pads, at most ",
                2 * x.dim(), " for input ", shape_str(x.shape()), ", got ", pads.size());
  TESSERA_CHECK(mode == PadMode::constant || value == 0.0, "pad", "a value is only for constant padding, not ", mode_name(mode));
  Tensor y = x;
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    const int64_t axis = x.dim() - 1 - static_cast<int64_t>(i), lo = pads[2 * i], hi = pads[2 * i + 1], n = y.size(axis);
    constexpr int64_t kMaxPad = int64_t{1} << 40;  // (no std::abs: it overflows for INT64_MIN)
    TESSERA_CHECK(lo >= -kMaxPad && lo <= kMaxPad && hi >= -kMaxPad && hi <= kMaxPad, "pad", "pads ", lo, ", ", hi, " are too large");
    if (mode == PadMode::constant) {
      y = pad_constant(y, axis, lo, hi, value);
      continue;
    }
    // A negative pad crops, in every mode, as in PyTorch: output j reads source_index(j - lo) in
    // the input's own coordinates, so the other side's reflection still mirrors the whole axis.
    const int64_t plo = std::max<int64_t>(lo, 0), phi = std::max<int64_t>(hi, 0);
    const bool fits = n > 0 && -lo <= n && -hi <= n && n + lo + hi >= 0 &&
                      (mode == PadMode::reflect ? plo < n && phi < n : mode == PadMode::circular ? plo <= n && phi <= n : true);
    TESSERA_CHECK(fits, "pad", mode_name(mode), " padding of ", lo, " and ", hi, " does not fit axis ", axis, " of size ", n, " in input ",
                  shape_str(x.shape()), mode == PadMode::reflect ? " (reflect needs pads smaller than the size)" : "");
    if (lo == 0 && hi == 0) continue;
    std::vector<int64_t> index(static_cast<size_t>(n + lo + hi));
    for (int64_t j = -lo; j < n + hi; ++j) index[static_cast<size_t>(j + lo)] = source_index(mode, j, n);
    y = index_select(y, axis, from_vector(index, {n + lo + hi}).to(y.device()));
  }
  return y;
}

namespace {
struct CeilAxis {
  int64_t out, extra;  ///< output size; rows/columns the last window reaches past the right padding
};
CeilAxis ceil_axis(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  if (span < 0 || s < 1) return {0, 0};
  int64_t out = (span + s - 1) / s + 1;
  if ((out - 1) * s >= in + p) --out;  // a window may not start in the right padding
  return {out, std::max<int64_t>(0, (out - 1) * s - span)};
}
void check_pool_input(const Tensor& x, const char* op) {
  detail::check_defined(x, op);
  TESSERA_CHECK(x.dim() == 4, op, "input must be [N, C, H, W], got ", shape_str(x.shape()));
}
}  // namespace

Tensor max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding, Size2 dilation, bool ceil_mode) {
  const Size2 st = stride.value_or(kernel);
  if (!ceil_mode) return max_pool2d(x, kernel, st, padding, dilation);
  check_pool_input(x, "max_pool2d");
  const CeilAxis h = ceil_axis(x.size(2), kernel[0], st[0], padding[0], dilation[0]);
  const CeilAxis w = ceil_axis(x.size(3), kernel[1], st[1], padding[1], dilation[1]);
  // The rounded-up windows reach past the right padding: extend the input there with -inf.
  const Tensor xe = h.extra || w.extra ? pad(x, {0, w.extra, 0, h.extra}, PadMode::constant, -INFINITY) : x;
  return max_pool2d(xe, kernel, st, padding, dilation);
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding, bool count_include_pad, bool ceil_mode) {
  const Size2 st = stride.value_or(kernel);
  if (!ceil_mode) return avg_pool2d(x, kernel, st, padding, count_include_pad);
  check_pool_input(x, "avg_pool2d");
  const CeilAxis h = ceil_axis(x.size(2), kernel[0], st[0], padding[0], 1);
  const CeilAxis w = ceil_axis(x.size(3), kernel[1], st[1], padding[1], 1);
  if (!h.extra && !w.extra) return avg_pool2d(x, kernel, st, padding, count_include_pad);
  // Window sums over the input extended with zeros, over each window's count: PyTorch counts
  // the part inside the padded input (count_include_pad) or inside the input itself.
  const Tensor sums = mul(avg_pool2d(pad(x, {0, w.extra, 0, h.extra}), kernel, st, padding, true), static_cast<double>(kernel[0] * kernel[1]));
  auto counts = [&](int64_t in, int64_t out, int64_t k, int64_t s, int64_t p) {
    std::vector<float> c(static_cast<size_t>(out));
    for (int64_t i = 0; i < out; ++i) {
      int64_t lo = i * s - p, hi = std::min(lo + k, in + p);
      if (!count_include_pad) lo = std::max<int64_t>(lo, 0), hi = std::min(hi, in);
      c[static_cast<size_t>(i)] = static_cast<float>(hi - lo);
    }
    return c;
  };
  const Tensor ch = from_vector(counts(x.size(2), h.out, kernel[0], st[0], padding[0]), {h.out, 1});
  const Tensor cw = from_vector(counts(x.size(3), w.out, kernel[1], st[1], padding[1]), {1, w.out});
  return div(sums, mul(ch, cw).to(x.dtype()).to(x.device()));
}

}  // namespace tessera
