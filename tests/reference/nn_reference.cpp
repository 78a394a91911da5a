#include "reference/nn_reference.h"

#include <cmath>

namespace tessera::ref {

Ref conv2d(const Ref& x, const Ref& w, const Ref* bias, I2 s, I2 p, I2 d, int64_t groups) {
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3];
  const int64_t o = w.shape[0], cg = w.shape[1], kh = w.shape[2], kw = w.shape[3], og = o / groups;
  const int64_t ho = (h + 2 * p[0] - d[0] * (kh - 1) - 1) / s[0] + 1, wo = (wd + 2 * p[1] - d[1] * (kw - 1) - 1) / s[1] + 1;
  Ref out{{n, o, ho, wo}, std::vector<double>(static_cast<size_t>(n * o * ho * wo), 0.0)};
  (void)c;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j) {
          double acc = bias ? bias->v[oc] : 0.0;
          const int64_t g = oc / og;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t a = 0; a < kh; ++a)
              for (int64_t e = 0; e < kw; ++e) {
                const int64_t ih = i * s[0] - p[0] + a * d[0], iw = j * s[1] - p[1] + e * d[1];
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                acc += x.v[((b * x.shape[1] + g * cg + ci) * h + ih) * wd + iw] * w.v[((oc * cg + ci) * kh + a) * kw + e];
              }
          out.v[((b * o + oc) * ho + i) * wo + j] = acc;
        }
  return out;
}

namespace {
template <class F> Ref pool(const Ref& x, I2 k, I2 s, I2 p, I2 d, F f) {
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], w = x.shape[3];
  const int64_t ho = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) / s[0] + 1, wo = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) / s[1] + 1;
  Ref out{{n, c, ho, wo}, std::vector<double>(static_cast<size_t>(n * c * ho * wo))};
  for (int64_t pl = 0; pl < n * c; ++pl)
    for (int64_t i = 0; i < ho; ++i)
      for (int64_t j = 0; j < wo; ++j) out.v[(pl * ho + i) * wo + j] = f(x.v.data() + pl * h * w, h, w, i, j);
  return out;
}
}  // namespace

Ref max_pool2d(const Ref& x, I2 k, I2 s, I2 p, I2 d) {
  return pool(x, k, s, p, d, [&](const double* plane, int64_t h, int64_t w, int64_t i, int64_t j) {
    double best = -INFINITY;
    for (int64_t a = 0; a < k[0]; ++a)
      for (int64_t e = 0; e < k[1]; ++e) {
        const int64_t ih = i * s[0] - p[0] + a * d[0], iw = j * s[1] - p[1] + e * d[1];
        if (ih >= 0 && ih < h && iw >= 0 && iw < w) best = std::max(best, plane[ih * w + iw]);
      }
    return best;
  });
}

Ref avg_pool2d(const Ref& x, I2 k, I2 s, I2 p, bool count_include_pad) {
  return pool(x, k, s, p, {1, 1}, [&](const double* plane, int64_t h, int64_t w, int64_t i, int64_t j) {
    double acc = 0;
    int64_t count = 0, padded = 0;
    for (int64_t a = 0; a < k[0]; ++a)
      for (int64_t e = 0; e < k[1]; ++e) {
        const int64_t ih = i * s[0] - p[0] + a, iw = j * s[1] - p[1] + e;
        if (ih >= -p[0] && ih < h + p[0] && iw >= -p[1] && iw < w + p[1]) ++padded;
        if (ih >= 0 && ih < h && iw >= 0 && iw < w) acc += plane[ih * w + iw], ++count;
      }
    return acc / static_cast<double>(count_include_pad ? padded : count);
  });
}

Ref batch_norm(const Ref& x, const Ref* gamma, const Ref* beta, double eps) {
  const int64_t n = x.shape[0], c = x.shape[1], sp = x.numel() / (n * c);
  Ref out = x;
  for (int64_t k = 0; k < c; ++k) {
    double s = 0, v = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < sp; ++j) s += x.v[(i * c + k) * sp + j];
    const double mu = s / static_cast<double>(n * sp);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < sp; ++j) v += std::pow(x.v[(i * c + k) * sp + j] - mu, 2);
    const double inv = 1 / std::sqrt(v / static_cast<double>(n * sp) + eps);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < sp; ++j) {
        double& y = out.v[(i * c + k) * sp + j];
        y = (y - mu) * inv * (gamma ? gamma->v[k] : 1.0) + (beta ? beta->v[k] : 0.0);
      }
  }
  return out;
}

Ref layer_norm(const Ref& x, int64_t dims, const Ref* gamma, const Ref* beta, double eps) {
  int64_t d = 1;
  for (int64_t i = 0; i < dims; ++i) d *= x.shape[x.shape.size() - 1 - i];
  Ref out = x;
  for (int64_t r = 0; r < x.numel() / d; ++r) {
    double s = 0, v = 0;
    for (int64_t j = 0; j < d; ++j) s += x.v[r * d + j];
    const double mu = s / static_cast<double>(d);
    for (int64_t j = 0; j < d; ++j) v += std::pow(x.v[r * d + j] - mu, 2);
    const double inv = 1 / std::sqrt(v / static_cast<double>(d) + eps);
    for (int64_t j = 0; j < d; ++j) {
      out.v[r * d + j] = (x.v[r * d + j] - mu) * inv * (gamma ? gamma->v[j] : 1.0) + (beta ? beta->v[j] : 0.0);
    }
  }
  return out;
}

Ref cross_entropy(const Ref& logits, const std::vector<int64_t>& target, double smoothing, int64_t ignore) {
  const int64_t n = logits.shape[0], c = logits.shape[1];
  Ref out{{n}, std::vector<double>(static_cast<size_t>(n), 0.0)};
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] == ignore) continue;
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < c; ++j) mx = std::max(mx, logits.v[i * c + j]);
    for (int64_t j = 0; j < c; ++j) s += std::exp(logits.v[i * c + j] - mx);
    const double lse = mx + std::log(s);
    double loss = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double q = (j == target[i] ? 1.0 - smoothing : 0.0) + smoothing / static_cast<double>(c);
      loss -= q * (logits.v[i * c + j] - lse);
    }
    out.v[i] = loss;
  }
  return out;
}

}  // namespace tessera::ref
