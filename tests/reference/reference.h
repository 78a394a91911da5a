#pragma once
// The test oracle: a naive, obviously-correct double-precision implementation of the op
// semantics, independent of every backend (it never calls a Tessera kernel).
#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/shape.h"

namespace tessera::ref {

struct Ref {
  Shape shape;
  std::vector<double> v;  // row-major
  int64_t numel() const { return static_cast<int64_t>(v.size()); }
};

/** Row-major linear index -> multi-index. */
std::vector<int64_t> unravel(int64_t linear, const Shape& shape);
/** Multi-index -> row-major linear index. */
int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape);

Ref map(const Ref& a, const std::function<double(double)>& f);
/** Elementwise with NumPy broadcasting. */
Ref map2(const Ref& a, const Ref& b, const std::function<double(double, double)>& f);
Ref map3(const Ref& a, const Ref& b, const Ref& c, const std::function<double(double, double, double)>& f);

/** Reduces `axes` (empty = all) with fold(acc, x) from `init`. */
Ref reduce(const Ref& a, std::vector<int64_t> axes, bool keepdim, double init,
           const std::function<double(double, double)>& fold);
Ref arg_reduce(const Ref& a, int64_t axis, bool is_max);
Ref cumsum(const Ref& a, int64_t axis);
Ref softmax(const Ref& a, int64_t axis, bool log);
/** torch.matmul semantics, including 1-D operands and broadcast batch axes. */
Ref matmul(const Ref& a, const Ref& b);
Ref transpose_last2(const Ref& a);
Ref index_select(const Ref& x, int64_t axis, const std::vector<int64_t>& index);
Ref gather(const Ref& x, int64_t axis, const Ref& index);
Ref scatter_add(const Ref& x, int64_t axis, const Ref& index, const Ref& src);
Ref permute(const Ref& a, const std::vector<int64_t>& order);

/** Reference scalar functions by op name ("exp", "gelu_tanh", ...). */
double unary(const char* op, double x);
double binary(const char* op, double a, double b);

}  // namespace tessera::ref
