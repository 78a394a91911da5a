#include "reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace tessera::ref {

std::vector<int64_t> unravel(int64_t linear, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = linear % shape[d];
    linear /= shape[d];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t linear = 0;
  for (size_t d = 0; d < shape.size(); ++d) linear = linear * shape[d] + idx[d];
  return linear;
}

namespace {
Shape bshape(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) throw std::runtime_error("ref: shapes do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}
// Value of `a` at the output multi-index `idx` under broadcasting.
double at_broadcast(const Ref& a, const std::vector<int64_t>& idx) {
  const size_t lead = idx.size() - a.shape.size();
  int64_t linear = 0;
  for (size_t d = 0; d < a.shape.size(); ++d) linear = linear * a.shape[d] + (a.shape[d] == 1 ? 0 : idx[d + lead]);
  return a.v[linear];
}
}  // namespace

Ref map(const Ref& a, const std::function<double(double)>& f) {
  Ref r{a.shape, a.v};
  for (double& x : r.v) x = f(x);
  return r;
}

Ref map2(const Ref& a, const Ref& b, const std::function<double(double, double)>& f) {
  Ref r{bshape(a.shape, b.shape), {}};
  r.v.resize(static_cast<size_t>(numel(r.shape)));
  for (int64_t i = 0; i < r.numel(); ++i) {
    const auto idx = unravel(i, r.shape);
    r.v[i] = f(at_broadcast(a, idx), at_broadcast(b, idx));
  }
  return r;
}

Ref map3(const Ref& a, const Ref& b, const Ref& c, const std::function<double(double, double, double)>& f) {
  Ref r{bshape(bshape(a.shape, b.shape), c.shape), {}};
  r.v.resize(static_cast<size_t>(numel(r.shape)));
  for (int64_t i = 0; i < r.numel(); ++i) {
    const auto idx = unravel(i, r.shape);
    r.v[i] = f(at_broadcast(a, idx), at_broadcast(b, idx), at_broadcast(c, idx));
  }
  return r;
}

Ref reduce(const Ref& a, std::vector<int64_t> axes, bool keepdim, double init,
           const std::function<double(double, double)>& fold) {
  const int64_t rank = static_cast<int64_t>(a.shape.size());
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  for (auto& ax : axes) ax = ax < 0 ? ax + rank : ax;
  Shape kept_shape, out_shape;
  for (int64_t d = 0; d < rank; ++d) {
    const bool red = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!red) kept_shape.push_back(a.shape[d]);
    if (!red) out_shape.push_back(a.shape[d]);
    else if (keepdim) out_shape.push_back(1);
  }
  Ref r{out_shape, std::vector<double>(static_cast<size_t>(numel(kept_shape)), init)};
  for (int64_t i = 0; i < a.numel(); ++i) {
    const auto idx = unravel(i, a.shape);
    std::vector<int64_t> kidx;
    for (int64_t d = 0; d < rank; ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) kidx.push_back(idx[d]);
    }
    double& acc = r.v[ravel(kidx, kept_shape)];
    acc = fold(acc, a.v[i]);
  }
  return r;
}

Ref arg_reduce(const Ref& a, int64_t axis, bool is_max) {
  Shape out_shape = a.shape;
  out_shape.erase(out_shape.begin() + axis);
  Ref r{out_shape, std::vector<double>(static_cast<size_t>(numel(out_shape)))};
  for (int64_t o = 0; o < r.numel(); ++o) {
    auto idx = unravel(o, out_shape);
    idx.insert(idx.begin() + axis, 0);
    double best = 0;
    int64_t best_i = -1;
    for (int64_t i = 0; i < a.shape[axis]; ++i) {
      idx[axis] = i;
      const double v = a.v[ravel(idx, a.shape)];
      if (best_i < 0 || (std::isnan(v) && !std::isnan(best)) || (!std::isnan(best) && (is_max ? v > best : v < best))) {
        best = v;
        best_i = i;
      }
    }
    r.v[o] = static_cast<double>(best_i);
  }
  return r;
}

Ref cumsum(const Ref& a, int64_t axis) {
  Ref r = a;
  for (int64_t i = 0; i < a.numel(); ++i) {
    auto idx = unravel(i, a.shape);
    if (idx[axis] == 0) continue;
    --idx[axis];
    r.v[i] += r.v[ravel(idx, a.shape)];
  }
  return r;
}

Ref softmax(const Ref& a, int64_t axis, bool log) {
  Ref r = a;
  for (int64_t i = 0; i < a.numel(); ++i) {
    auto idx = unravel(i, a.shape);
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < a.shape[axis]; ++j) {
      idx[axis] = j;
      mx = std::max(mx, a.v[ravel(idx, a.shape)]);
    }
    for (int64_t j = 0; j < a.shape[axis]; ++j) {
      idx[axis] = j;
      sum += std::exp(a.v[ravel(idx, a.shape)] - mx);
    }
    r.v[i] = log ? a.v[i] - mx - std::log(sum) : std::exp(a.v[i] - mx) / sum;
  }
  return r;
}

Ref transpose_last2(const Ref& a) {
  std::vector<int64_t> order(a.shape.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::swap(order[order.size() - 1], order[order.size() - 2]);
  return permute(a, order);
}

Ref permute(const Ref& a, const std::vector<int64_t>& order) {
  Shape shape(order.size());
  for (size_t i = 0; i < order.size(); ++i) shape[i] = a.shape[order[i]];
  Ref r{shape, std::vector<double>(a.v.size())};
  for (int64_t i = 0; i < r.numel(); ++i) {
    const auto idx = unravel(i, shape);
    std::vector<int64_t> src(order.size());
    for (size_t d = 0; d < order.size(); ++d) src[order[d]] = idx[d];
    r.v[i] = a.v[ravel(src, a.shape)];
  }
  return r;
}

Ref matmul(const Ref& a_in, const Ref& b_in) {
  Ref a = a_in, b = b_in;
  const bool a1 = a.shape.size() == 1, b1 = b.shape.size() == 1;
  if (a1) a.shape.insert(a.shape.begin(), 1);
  if (b1) b.shape.push_back(1);
  const int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back(), n = b.shape.back();
  Shape ab(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  const Shape batch = bshape(ab, bb);
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Ref r{out_shape, std::vector<double>(static_cast<size_t>(numel(out_shape)), 0.0)};
  const int64_t nb = numel(batch);
  for (int64_t bi = 0; bi < nb; ++bi) {
    const auto bidx = unravel(bi, batch);
    auto offset = [&](const Shape& s, const Shape& full) {
      int64_t lin = 0;
      const size_t lead = bidx.size() - (full.size() - 2);
      for (size_t d = 0; d + 2 < full.size(); ++d) lin = lin * full[d] + (full[d] == 1 ? 0 : bidx[d + lead]);
      return lin * s[s.size() - 2] * s.back();
    };
    const int64_t oa = offset(a.shape, a.shape), ob = offset(b.shape, b.shape);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += a.v[oa + i * k + p] * b.v[ob + p * n + j];
        r.v[(bi * m + i) * n + j] = acc;
      }
    }
  }
  if (a1) r.shape.erase(r.shape.end() - 2);
  if (b1) r.shape.pop_back();
  return r;
}

Ref index_select(const Ref& x, int64_t axis, const std::vector<int64_t>& index) {
  Shape shape = x.shape;
  shape[axis] = static_cast<int64_t>(index.size());
  Ref r{shape, std::vector<double>(static_cast<size_t>(numel(shape)))};
  for (int64_t i = 0; i < r.numel(); ++i) {
    auto idx = unravel(i, shape);
    idx[axis] = index[idx[axis]];
    r.v[i] = x.v[ravel(idx, x.shape)];
  }
  return r;
}

Ref gather(const Ref& x, int64_t axis, const Ref& index) {
  Ref r{index.shape, std::vector<double>(index.v.size())};
  for (int64_t i = 0; i < r.numel(); ++i) {
    auto idx = unravel(i, index.shape);
    idx[axis] = static_cast<int64_t>(index.v[i]);
    r.v[i] = x.v[ravel(idx, x.shape)];
  }
  return r;
}

Ref scatter_add(const Ref& x, int64_t axis, const Ref& index, const Ref& src) {
  Ref r = x;
  for (int64_t i = 0; i < index.numel(); ++i) {
    auto idx = unravel(i, index.shape);
    const double v = src.v[ravel(idx, src.shape)];
    idx[axis] = static_cast<int64_t>(index.v[i]);
    r.v[ravel(idx, x.shape)] += v;
  }
  return r;
}

double unary(const char* op, double x) {
  const std::string o(op);
  if (o == "neg") return -x;
  if (o == "abs") return std::fabs(x);
  if (o == "sign") return std::isnan(x) ? x : (x > 0) - (x < 0);
  if (o == "square") return x * x;
  if (o == "relu") return x > 0 || std::isnan(x) ? x : 0.0;
  if (o == "floor") return std::floor(x);
  if (o == "ceil") return std::ceil(x);
  if (o == "round") return std::nearbyint(x);
  if (o == "exp") return std::exp(x);
  if (o == "expm1") return std::expm1(x);
  if (o == "log") return std::log(x);
  if (o == "log1p") return std::log1p(x);
  if (o == "sqrt") return std::sqrt(x);
  if (o == "rsqrt") return 1.0 / std::sqrt(x);
  if (o == "reciprocal") return 1.0 / x;
  if (o == "sin") return std::sin(x);
  if (o == "cos") return std::cos(x);
  if (o == "tanh") return std::tanh(x);
  if (o == "sigmoid") return 1.0 / (1.0 + std::exp(-x));
  if (o == "gelu") return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  if (o == "gelu_tanh") {
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  if (o == "silu") return x / (1.0 + std::exp(-x));
  if (o == "softplus") return std::log1p(std::exp(x));
  if (o == "erf") return std::erf(x);
  if (o == "trunc") return std::trunc(x);
  if (o == "tan") return std::tan(x);
  if (o == "asin") return std::asin(x);
  if (o == "acos") return std::acos(x);
  if (o == "atan") return std::atan(x);
  if (o == "log2") return std::log2(x);
  if (o == "log10") return std::log10(x);
  if (o == "sinh") return std::sinh(x);
  if (o == "cosh") return std::cosh(x);
  if (o == "asinh") return std::asinh(x);
  if (o == "acosh") return std::acosh(x);
  if (o == "atanh") return std::atanh(x);
  if (o == "exp2") return std::exp2(x);
  const auto relu6_shift3 = [](double v) { return v + 3 < 0 ? 0.0 : (v + 3 > 6 ? 6.0 : v + 3); };  // NaN passes
  if (o == "mish") return x * std::tanh(std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))));
  if (o == "hardswish") return x * relu6_shift3(x) / 6;
  if (o == "hardsigmoid") return relu6_shift3(x) / 6;
  if (o == "elu") return x > 0 ? x : std::expm1(x);
  if (o == "selu") return 1.0507009873554804934193349852946 * (x > 0 ? x : 1.6732632423543772848170429916717 * std::expm1(x));
  throw std::runtime_error("ref::unary: unknown op " + o);
}

double binary(const char* op, double a, double b) {
  const std::string o(op);
  if (o == "add") return a + b;
  if (o == "sub") return a - b;
  if (o == "mul") return a * b;
  if (o == "div") return a / b;
  if (o == "pow") return std::pow(a, b);
  if (o == "maximum") return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
  if (o == "minimum") return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
  if (o == "eq") return a == b;
  if (o == "ne") return a != b;
  if (o == "lt") return a < b;
  if (o == "le") return a <= b;
  if (o == "gt") return a > b;
  if (o == "ge") return a >= b;
  if (o == "logical_and") return (a != 0) && (b != 0);
  if (o == "logical_or") return (a != 0) || (b != 0);
  if (o == "logical_xor") return (a != 0) != (b != 0);
  if (o == "atan2") return std::atan2(a, b);
  if (o == "fmod") return std::fmod(a, b);
  if (o == "remainder") {
    const double r = std::fmod(a, b);
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
  }
  if (o == "floor_divide") return std::floor(a / b);
  throw std::runtime_error("ref::binary: unknown op " + o);
}

}  // namespace tessera::ref
