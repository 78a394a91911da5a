// PyTorch-style printing: tensor([[1., 2.],
//                                 [3., 4.]], dtype=float64)
#include <cmath>
#include <cstdio>
#include <ostream>

#include "tessera/tensor.h"

namespace tessera {

namespace detail {
double read_element(const Tensor& t, int64_t linear) {
  int64_t off = t.offset();
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t n = t.shape()[d];
    off += (linear % n) * t.strides()[d];
    linear /= n;
  }
  const char* base = static_cast<const char*>(t.storage()->data());
  switch (t.dtype()) {
    case DType::f32: return reinterpret_cast<const float*>(base)[off];
    case DType::f64: return reinterpret_cast<const double*>(base)[off];
    case DType::f16: return static_cast<float>(reinterpret_cast<const Half*>(base)[off]);
    case DType::bf16: return static_cast<float>(reinterpret_cast<const BFloat16*>(base)[off]);
    case DType::i8: return reinterpret_cast<const int8_t*>(base)[off];
    case DType::u8: return reinterpret_cast<const uint8_t*>(base)[off];
    case DType::i32: return reinterpret_cast<const int32_t*>(base)[off];
    case DType::i64: return static_cast<double>(reinterpret_cast<const int64_t*>(base)[off]);
    case DType::boolean: return reinterpret_cast<const bool*>(base)[off] ? 1.0 : 0.0;
  }
  return 0.0;
}
}  // namespace detail

namespace {
constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  DType dtype;
  enum { kInt, kIntegralFloat, kFixed, kSci } mode = kFixed;

  std::string operator()(double v) const {
    char buf[64];
    if (dtype == DType::boolean) return v != 0 ? "True" : "False";
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (mode) {
      case kInt: std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v)); break;
      case kIntegralFloat: std::snprintf(buf, sizeof buf, "%.0f.", v); break;
      case kFixed: std::snprintf(buf, sizeof buf, "%.4f", v); break;
      case kSci: std::snprintf(buf, sizeof buf, "%.4e", v); break;
    }
    return buf;
  }
};

// Indices shown along an axis of size n: all of them, or the first and last kEdgeItems.
std::vector<int64_t> shown(int64_t n, bool summarize) {
  std::vector<int64_t> idx;
  if (!summarize || n <= 2 * kEdgeItems) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
    idx.push_back(-1);  // the ellipsis
    for (int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
  }
  return idx;
}

void print_rec(std::string& out, const Tensor& t, const Formatter& fmt, size_t width, int64_t axis, int64_t base,
               int indent, bool summarize) {
  const int64_t n = t.shape()[axis];
  const int64_t inner = numel(Shape(t.shape().begin() + axis + 1, t.shape().end()));
  out += '[';
  const auto idx = shown(n, summarize);
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k) {
      if (axis == t.dim() - 1) {
        out += ", ";
      } else {
        out += ',';
        out.append(static_cast<size_t>(t.dim() - 1 - axis), '\n');
        out.append(static_cast<size_t>(indent + axis + 1), ' ');
      }
    }
    if (idx[k] < 0) {
      out += "...";
      continue;
    }
    if (axis == t.dim() - 1) {
      std::string s = fmt(detail::read_element(t, base + idx[k]));
      out.append(width - std::min(width, s.size()), ' ');
      out += s;
    } else {
      print_rec(out, t, fmt, width, axis + 1, base + idx[k] * inner, indent, summarize);
    }
  }
  out += ']';
}
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const Tensor host = device() == kCPU ? *this : to(kCPU);
  const bool summarize = numel() > kSummarizeAbove;
  Formatter fmt{dtype()};
  // Choose the number style from the values that will be shown, like PyTorch.
  double max_abs = 0, min_abs = INFINITY;
  bool all_integral = true;
  const int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && i == 2000) break;
    const double v = detail::read_element(host, i);
    if (!std::isfinite(v)) continue;
    all_integral &= v == std::floor(v);
    max_abs = std::max(max_abs, std::fabs(v));
    if (v != 0) min_abs = std::min(min_abs, std::fabs(v));
  }
  if (!is_floating(dtype())) {
    fmt.mode = Formatter::kInt;
  } else if (all_integral && max_abs < 1e8) {
    fmt.mode = Formatter::kIntegralFloat;
  } else if (max_abs >= 1e8 || (min_abs < 1e-4) || (max_abs / min_abs > 1e3 && min_abs < 1e-2)) {
    fmt.mode = Formatter::kSci;
  }
  std::string out = "tensor(";
  if (dim() == 0) {
    out += fmt(detail::read_element(host, 0));
  } else if (n == 0) {
    out += "[], size=(";
    for (int64_t d = 0; d < dim(); ++d) out += (d ? ", " : "") + std::to_string(shape()[d]);
    out += dim() == 1 ? ",)" : ")";
  } else {
    size_t width = 0;
    for (int64_t i = 0; i < std::min<int64_t>(n, 2000); ++i) width = std::max(width, fmt(detail::read_element(host, i)).size());
    print_rec(out, host, fmt, width, 0, 0, 7, summarize);
  }
  if (device() != kCPU) out += ", device='" + device().str() + "'";
  if (dtype() != DType::f32 && dtype() != DType::i64 && dtype() != DType::boolean) {
    out += ", dtype=";
    out += dtype_name(dtype());
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace tessera
