// ONNX ops composed from Tessera's: the training-preview optimizers (Adagrad, Adam, Momentum,
// domain ai.onnx.preview.training), the signal windows (Hann, Hamming, Blackman), DFT,
// MeanVarianceNormalization, LRN, ReverseSequence, MaxUnpool and Det.
#include <cmath>
#include <numbers>

#include "proto.h"

namespace tessera::onnx {
namespace {
using Out = std::vector<Tensor>;

// The optimizers' inputs after R (learning rate) and T (update count): `groups` runs of n
// tensors (X..., G..., then the state tensors), n = (inputs - 2) / groups.
int64_t optimizer_tensors(const Ctx& c, int64_t groups) {
  const int64_t rest = static_cast<int64_t>(c.num_inputs()) - 2;
  TESSERA_CHECK(rest > 0 && rest % groups == 0, "onnx", c.node().op_type(), " takes R, T and ", groups, " equal runs of tensors, got ",
                c.num_inputs(), " inputs");
  return rest / groups;
}

// Adagrad: r = R / (1 + T decay); G' = norm X + G; H' = H + G'^2; X' = X - r G' / (sqrt(H') + eps).
Out adagrad(const Ctx& c) {
  const int64_t n = optimizer_tensors(c, 3);
  const double r = c.scalar(0) / (1.0 + c.scalar(1) * c.attr_f("decay_factor", 0.0));
  const double eps = c.attr_f("epsilon", 0.0), norm = c.attr_f("norm_coefficient", 0.0);
  Out xs, hs;
  for (int64_t i = 0; i < n; ++i) {
    const Tensor &x = c.in(static_cast<size_t>(2 + i)), &g = c.in(static_cast<size_t>(2 + n + i)),
                 &h = c.in(static_cast<size_t>(2 + 2 * n + i));
    const Tensor greg = add(mul(x, norm), g), hn = add(h, mul(greg, greg));
    xs.push_back(sub(x, mul(div(greg, add(sqrt(hn), eps)), r)).to(x.dtype()));
    hs.push_back(hn.to(h.dtype()));
  }
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

// Adam: G' = norm X + G; V' = a V + (1 - a) G'; H' = b H + (1 - b) G'^2; the step R scaled by
// sqrt(1 - b^T) / (1 - a^T) when T > 0; X' = (1 - norm_post) (X - R' V' / (sqrt(H') + eps)).
Out adam(const Ctx& c) {
  const int64_t n = optimizer_tensors(c, 4);
  const double t = c.scalar(1), a = c.attr_f("alpha", 0.9), b = c.attr_f("beta", 0.999), eps = c.attr_f("epsilon", 0.0);
  const double norm = c.attr_f("norm_coefficient", 0.0), post = c.attr_f("norm_coefficient_post", 0.0);
  const double r = t > 0 ? c.scalar(0) * std::sqrt(1.0 - std::pow(b, t)) / (1.0 - std::pow(a, t)) : c.scalar(0);
  Out xs, vs, hs;
  for (int64_t i = 0; i < n; ++i) {
    const auto in = [&](int64_t run) { return c.in(static_cast<size_t>(2 + run * n + i)); };
    const Tensor x = in(0), greg = add(mul(x, norm), in(1));
    const Tensor vn = add(mul(in(2), a), mul(greg, 1.0 - a)), hn = add(mul(in(3), b), mul(mul(greg, greg), 1.0 - b));
    xs.push_back(mul(sub(x, mul(div(vn, add(sqrt(hn), eps)), r)), 1.0 - post).to(x.dtype()));
    vs.push_back(vn.to(x.dtype()));
    hs.push_back(hn.to(x.dtype()));
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

// Momentum: G' = norm X + G; V' = a V + b' G' (b' = b after the first update, 1 at T = 0);
// standard X' = X - R V', nesterov X' = X - R (G' + a V').
Out momentum(const Ctx& c) {
  const int64_t n = optimizer_tensors(c, 3);
  const double r = c.scalar(0), t = c.scalar(1), a = c.attr_f("alpha", 0.9), norm = c.attr_f("norm_coefficient", 0.0);
  const double b = t > 0 ? c.attr_f("beta", 1.0) : 1.0;
  const bool nesterov = c.attr_s("mode", "standard") == "nesterov";
  Out xs, vs;
  for (int64_t i = 0; i < n; ++i) {
    const auto in = [&](int64_t run) { return c.in(static_cast<size_t>(2 + run * n + i)); };
    const Tensor x = in(0), greg = add(mul(x, norm), in(1)), vn = add(mul(in(2), a), mul(greg, b));
    xs.push_back(sub(x, mul(nesterov ? add(greg, mul(vn, a)) : vn, r)).to(x.dtype()));
    vs.push_back(vn.to(x.dtype()));
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  return xs;
}

// A cosine-sum window of `size` points: sum_k coef[k] (-1)^k cos(2 pi k n / N), N = size when
// periodic, size - 1 when symmetric; computed in f64 on the host, returned in output_datatype.
Out window(const Ctx& c, std::vector<double> coef) {
  const int64_t size = static_cast<int64_t>(c.scalar(0));
  TESSERA_CHECK(size >= 0, "onnx", c.node().op_type(), ": size must be >= 0, got ", size);
  const double den = static_cast<double>(c.attr_i("periodic", 1) != 0 ? size : size - 1);
  std::vector<double> w(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    double v = 0;
    for (size_t k = 0; k < coef.size(); ++k) {
      v += (k % 2 ? -1.0 : 1.0) * coef[k] * std::cos(2.0 * std::numbers::pi * static_cast<double>(k) * static_cast<double>(i) / den);
    }
    w[static_cast<size_t>(i)] = den > 0 ? v : 1.0;
  }
  const DType dt = dtype_from_onnx(static_cast<int>(c.attr_i("output_datatype", 1)), c.node().op_type() + " output_datatype");
  return Out{from_vector(w, {size}).to(dt).to(c.device())};
}

// LRN: y = x / (bias + alpha / size * sum of x^2 over the `size` channels around c)^beta.
Tensor lrn(const Ctx& c) {
  const Tensor x = c.in(0);
  const int64_t size = c.attr_i("size", 1), lo = (size - 1) / 2, hi = size - 1 - lo;
  TESSERA_CHECK(x.dim() >= 3 && size > 0, "onnx", "LRN expects [N, C, ...] and size > 0, got ", shape_str(x.shape()), ", size ", size);
  const Tensor sq = mul(x, x);
  std::vector<int64_t> pads(static_cast<size_t>(2 * (x.dim() - 1)), 0);  // the channel axis: pad() takes the last axis first
  pads[pads.size() - 2] = lo, pads[pads.size() - 1] = hi;
  const Tensor padded = pad(sq, pads, PadMode::constant, 0.0);
  Tensor sum = padded.narrow(1, 0, x.size(1));
  for (int64_t k = 1; k < size; ++k) sum = add(sum, padded.narrow(1, k, x.size(1)));
  const Tensor denom =
      pow(add(mul(sum, c.attr_f("alpha", 1e-4) / static_cast<double>(size)), c.attr_f("bias", 1.0)), c.attr_f("beta", 0.75));
  return div(x, denom).to(x.dtype());
}

// MeanVarianceNormalization: (x - E x) / (sqrt(E x^2 - (E x)^2) + 1e-9) over `axes` (0, 2, 3).
Tensor mvn(const Ctx& c) {
  const Tensor x = c.in(0);
  Axes axes;
  for (int64_t a : c.attr_ints("axes", {0, 2, 3})) axes.push_back(axis_of(a, x.dim(), c.node()));
  const Tensor m = mean(x, axes, true), ex2 = mean(mul(x, x), axes, true);
  return div(sub(x, m), add(sqrt(sub(ex2, mul(m, m))), 1e-9)).to(x.dtype());
}

// ReverseSequence: for each batch entry b, its first sequence_lens[b] steps along time_axis
// reversed, the rest kept: a gather along the time axis with indices built on the host.
Tensor reverse_sequence(const Ctx& c) {
  const Tensor x = c.in(0);
  const int64_t bax = axis_of(c.attr_i("batch_axis", 1), x.dim(), c.node()), tax = axis_of(c.attr_i("time_axis", 0), x.dim(), c.node());
  TESSERA_CHECK(bax != tax && x.dim() >= 2, "onnx", "ReverseSequence needs distinct batch and time axes, got ", bax, " and ", tax);
  const std::vector<int64_t> lens = c.ints(1);
  const int64_t nb = x.size(bax), nt = x.size(tax);
  TESSERA_CHECK(static_cast<int64_t>(lens.size()) == nb, "onnx", "ReverseSequence: sequence_lens has ", lens.size(),
                " entries for a batch of ", nb);
  std::vector<int64_t> idx(static_cast<size_t>(nb * nt));  // [time, batch] or [batch, time], as the axes are ordered
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t len = std::clamp<int64_t>(lens[static_cast<size_t>(b)], 0, nt);
    for (int64_t t = 0; t < nt; ++t) idx[static_cast<size_t>(tax < bax ? t * nb + b : b * nt + t)] = t < len ? len - 1 - t : t;
  }
  Shape ishape(static_cast<size_t>(x.dim()), 1);
  ishape[static_cast<size_t>(bax)] = nb, ishape[static_cast<size_t>(tax)] = nt;
  const Tensor index = from_vector(idx, ishape).to(x.device()).expand(x.shape()).contiguous();
  return gather(x, tax, index);
}
// The DFT of x [..., 1 or 2] (real or complex) along `axis` over n points: a product with the
// cos and sin matrices [n, K] built on the host (K = n / 2 + 1 one-sided); the inverse
// conjugates the kernel and divides by n; a signal longer than n is truncated, shorter padded.
Tensor dft_along(const Ctx& c, const Tensor& x, int64_t axis, int64_t n, bool inverse, bool onesided) {
  TESSERA_CHECK(x.dim() >= 2 && (x.size(-1) == 1 || x.size(-1) == 2), "onnx", c.node().op_type(), " expects [..., 1 or 2], got ",
                shape_str(x.shape()));
  TESSERA_CHECK(n > 0, "onnx", c.node().op_type(), " length must be positive, got ", n);
  const DType dt = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor re = x.select(-1, 0).to(dt).transpose(axis, -1), im = x.size(-1) == 2 ? x.select(-1, 1).to(dt).transpose(axis, -1) : Tensor();
  const int64_t len = re.size(-1), k = onesided ? n / 2 + 1 : n;
  const auto fit = [&](const Tensor& t) {
    if (!t.defined()) return t;
    if (n <= len) return t.narrow(-1, 0, n);
    std::vector<int64_t> pads{0, n - len};
    return pad(t, pads, PadMode::constant, 0.0);
  };
  re = fit(re), im = fit(im);
  std::vector<double> cs(static_cast<size_t>(n * k)), sn(static_cast<size_t>(n * k));
  const double sign = inverse ? 1.0 : -1.0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      const double theta = 2.0 * std::numbers::pi * static_cast<double>((i * j) % n) / static_cast<double>(n);
      cs[static_cast<size_t>(i * k + j)] = std::cos(theta), sn[static_cast<size_t>(i * k + j)] = sign * std::sin(theta);
    }
  }
  const Tensor cm = from_vector(cs, {n, k}).to(dt).to(x.device()), sm = from_vector(sn, {n, k}).to(dt).to(x.device());
  Tensor out_re = matmul(re, cm), out_im = matmul(re, sm);
  if (im.defined()) out_re = sub(out_re, matmul(im, sm)), out_im = add(out_im, matmul(im, cm));
  if (inverse) out_re = div(out_re, static_cast<double>(n)), out_im = div(out_im, static_cast<double>(n));
  return stack({out_re.transpose(-1, axis), out_im.transpose(-1, axis)}, -1).to(x.dtype());
}

// DFT (opset 17): axis (default 1), inverse, onesided, optional dft_length input.
Tensor dft(const Ctx& c) {
  const Tensor x = c.in(0);
  const int64_t axis = axis_of(c.attr_i("axis", 1), x.dim() - 1, c.node());
  const int64_t n = c.has(1) ? static_cast<int64_t>(c.scalar(1)) : x.size(axis);
  return dft_along(c, x, axis, n, c.attr_i("inverse", 0) != 0, c.attr_i("onesided", 0) != 0);
}

// STFT(signal [B, L, 1 or 2], frame_step, window?, frame_length?) -> [B, frames, K, 2]: frames
// gathered by index, times the window, through dft_along.
Tensor stft(const Ctx& c) {
  const Tensor x = c.in(0);
  TESSERA_CHECK(x.dim() == 3, "onnx", "STFT expects a signal [B, L, 1 or 2], got ", shape_str(x.shape()));
  const int64_t step = static_cast<int64_t>(c.scalar(1));
  const int64_t length = c.has(3) ? static_cast<int64_t>(c.scalar(3)) : (c.has(2) ? c.in(2).numel() : 0);
  TESSERA_CHECK(step > 0 && length > 0 && length <= x.size(1), "onnx", "STFT needs frame_step > 0 and a frame length in [1, ", x.size(1),
                "], got ", step, " and ", length);
  const int64_t frames = (x.size(1) - length) / step + 1;
  std::vector<int64_t> idx(static_cast<size_t>(frames * length));
  for (int64_t f = 0; f < frames; ++f) {
    for (int64_t j = 0; j < length; ++j) idx[static_cast<size_t>(f * length + j)] = f * step + j;
  }
  Tensor framed = index_select(x, 1, from_vector(idx, {frames * length}).to(x.device())).reshape({x.size(0), frames, length, x.size(2)});
  if (c.has(2)) framed = mul(framed, c.in(2).to(x.dtype()).reshape({1, 1, length, 1}));
  return dft_along(c, framed, 2, length, false, c.attr_i("onesided", 1) != 0);
}

// MelWeightMatrix (opset 17) as the spec's reference: triangular filters between mel-spaced
// bins of a dft_length-point spectrum, [dft_length / 2 + 1, num_mel_bins].
Tensor mel_weight_matrix(const Ctx& c) {
  const int64_t mels = static_cast<int64_t>(c.scalar(0)), dft_length = static_cast<int64_t>(c.scalar(1));
  const double rate = c.scalar(2), lo = c.scalar(3), hi = c.scalar(4);
  TESSERA_CHECK(mels > 0 && dft_length > 0 && rate > 0, "onnx", "MelWeightMatrix needs positive num_mel_bins, dft_length and sample_rate");
  const int64_t bins = dft_length / 2 + 1;
  const double lo_mel = 2595.0 * std::log10(1.0 + lo / 700.0), hi_mel = 2595.0 * std::log10(1.0 + hi / 700.0);
  const double step = (hi_mel - lo_mel) / static_cast<double>(mels + 2);  // the reference divides by the count of edges
  std::vector<int64_t> edge(static_cast<size_t>(mels + 2));
  for (int64_t i = 0; i < mels + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (static_cast<double>(i) * step + lo_mel) / 2595.0) - 1.0);
    edge[static_cast<size_t>(i)] = static_cast<int64_t>(std::floor(static_cast<double>(dft_length + 1) * hz / rate));
  }
  std::vector<double> w(static_cast<size_t>(bins * mels), 0.0);
  const auto at = [&](int64_t j, int64_t i) -> double& {
    TESSERA_CHECK(j >= 0 && j < bins, "onnx", "MelWeightMatrix: a filter edge at bin ", j, " is outside the ", bins, " spectrum bins");
    return w[static_cast<size_t>(j * mels + i)];
  };
  for (int64_t i = 0; i < mels; ++i) {
    const int64_t left = edge[static_cast<size_t>(i)], centre = edge[static_cast<size_t>(i + 1)], right = edge[static_cast<size_t>(i + 2)];
    if (centre == left) at(centre, i) = 1.0;
    for (int64_t j = left; centre > left && j <= centre; ++j) at(j, i) = static_cast<double>(j - left) / static_cast<double>(centre - left);
    for (int64_t j = centre; j < right; ++j) at(j, i) = static_cast<double>(right - j) / static_cast<double>(right - centre);
  }
  const DType dt = dtype_from_onnx(static_cast<int>(c.attr_i("output_datatype", 1)), "MelWeightMatrix output_datatype");
  return from_vector(w, {bins, mels}).to(dt).to(c.device());
}

// MaxUnpool(X, I, output_shape?): zeros of the unpooled shape with X's values at the flat
// offsets in I (MaxPool's Indices).
Tensor max_unpool(const Ctx& c) {
  const Tensor x = c.in(0), idx = c.in(1).to(DType::i64);
  const int64_t spatial = x.dim() - 2;
  const std::vector<int64_t> kernel = c.attr_ints("kernel_shape"),
                             strides = c.attr_ints("strides", std::vector<int64_t>(static_cast<size_t>(spatial), 1));
  const std::vector<int64_t> pads = c.attr_ints("pads", std::vector<int64_t>(static_cast<size_t>(2 * spatial), 0));
  TESSERA_CHECK(static_cast<int64_t>(kernel.size()) == spatial, "onnx", "MaxUnpool kernel_shape has ", kernel.size(), " dims for ", spatial,
                " spatial axes");
  Shape out(x.shape().begin(), x.shape().begin() + 2);  // the shape MaxPool pooled from: the indices count in it
  for (int64_t i = 0; i < spatial; ++i) {
    const auto u = static_cast<size_t>(i);
    out.push_back((x.size(2 + i) - 1) * strides[u] + kernel[u] - pads[u] - pads[u + static_cast<size_t>(spatial)]);
  }
  Tensor y = scatter(zeros({numel(out)}, x.dtype(), x.device()), 0, idx.reshape({-1}), x.reshape({-1})).reshape(out);
  if (!c.has(2)) return y;
  const std::vector<int64_t> want = c.ints(2);  // a larger output: zeros after the end of each spatial axis
  TESSERA_CHECK(static_cast<int64_t>(want.size()) == x.dim(), "onnx", "MaxUnpool output_shape has ", want.size(), " dims for rank ",
                x.dim());
  std::vector<int64_t> grow;
  for (int64_t i = x.dim(); i-- > 2;) {
    const int64_t extra = want[static_cast<size_t>(i)] - out[static_cast<size_t>(i)];
    TESSERA_CHECK(extra >= 0, "onnx", "MaxUnpool output_shape ", shape_str(Shape(want)), " is smaller than the unpooled ", shape_str(out));
    grow.insert(grow.end(), {0, extra});
  }
  return pad(y, grow, PadMode::constant, 0.0);
}

// Det of [..., M, M] by Gaussian elimination with partial pivoting on the host, per matrix in
// f64 (ONNX models use it on small matrices).
Tensor det(const Ctx& c) {
  const Tensor x = c.in(0);
  TESSERA_CHECK(x.dim() >= 2 && x.size(-1) == x.size(-2), "onnx", "Det expects [..., M, M], got ", shape_str(x.shape()));
  const int64_t m = x.size(-1), count = m ? x.numel() / (m * m) : 0;
  std::vector<double> a = host_doubles(x), out(static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) {
    double* p = a.data() + b * m * m;
    double d = 1.0;
    for (int64_t col = 0; col < m && d != 0.0; ++col) {
      int64_t piv = col;
      for (int64_t r = col + 1; r < m; ++r) {
        if (std::fabs(p[r * m + col]) > std::fabs(p[piv * m + col])) piv = r;
      }
      if (p[piv * m + col] == 0.0) d = 0.0;
      if (d == 0.0) break;
      if (piv != col) {
        for (int64_t j = 0; j < m; ++j) std::swap(p[piv * m + j], p[col * m + j]);
        d = -d;
      }
      d *= p[col * m + col];
      for (int64_t r = col + 1; r < m; ++r) {
        const double f = p[r * m + col] / p[col * m + col];
        for (int64_t j = col; j < m; ++j) p[r * m + j] -= f * p[col * m + j];
      }
    }
    out[static_cast<size_t>(b)] = d;
  }
  return from_vector(out, Shape(x.shape().begin(), x.shape().end() - 2)).to(x.dtype()).to(x.device());
}
}  // namespace

void register_training_signal_ops(OpTable& t) {
  t["ai.onnx.preview.training.Adagrad"] = {&adagrad, {}};
  t["ai.onnx.preview.training.Adam"] = {&adam, {}};
  t["ai.onnx.preview.training.Momentum"] = {&momentum, {}};
  t["HannWindow"] = {[](const Ctx& c) { return window(c, {0.5, 0.5}); }, {}};
  t["HammingWindow"] = {[](const Ctx& c) { return window(c, {25.0 / 46.0, 21.0 / 46.0}); }, {}};
  t["BlackmanWindow"] = {[](const Ctx& c) { return window(c, {0.42, 0.5, 0.08}); }, {}};
  t["LRN"] = {[](const Ctx& c) { return Out{lrn(c)}; }, {}};
  t["MeanVarianceNormalization"] = {[](const Ctx& c) { return Out{mvn(c)}; }, {}};
  t["ReverseSequence"] = {[](const Ctx& c) { return Out{reverse_sequence(c)}; }, {}};
  t["DFT"] = {[](const Ctx& c) { return Out{dft(c)}; }, {}};
  t["STFT"] = {[](const Ctx& c) { return Out{stft(c)}; }, {}};
  t["MelWeightMatrix"] = {[](const Ctx& c) { return Out{mel_weight_matrix(c)}; }, {}};
  t["MaxUnpool"] = {[](const Ctx& c) { return Out{max_unpool(c)}; }, {}};
  t["Det"] = {[](const Ctx& c) { return Out{det(c)}; }, {}};
}

}  // namespace tessera::onnx
