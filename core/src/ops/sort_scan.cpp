// sort / topk as a bitonic sorting network and cumprod / cummax / cummin as Hillis-Steele
// doubling scans, written with elementwise ops, where and cat: the shapes GPUs run well
// (log n or log^2 n passes over the whole tensor, no data-dependent control flow), on every
// backend, with gradients through take_along_axis / mul.
#include <bit>

#include "dispatch.h"
#include "tessera/autograd.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/indexing.h"
#include "tessera/ops/reduction.h"
#include "tessera/ops/shape_ops.h"

namespace tessera {

namespace {
// Keys being sorted: values with their original positions (positions >= n are padding).
struct Keys {
  Tensor v, i;
};

// a strictly before b in the final order: padding last, NaN after every number (before them
// descending), then by value, then by position, which makes the network stable.
Tensor before(const Keys& a, const Keys& b, int64_t n, bool descending, bool floating) {
  const Tensor pad_a = ge(a.i, n), pad_b = ge(b.i, n);
  Tensor value_first = descending ? gt(a.v, b.v) : lt(a.v, b.v);
  Tensor value_tie = eq(a.v, b.v);
  if (floating) {
    const Tensor nan_a = isnan(a.v), nan_b = isnan(b.v);
    value_first = descending ? logical_or(logical_and(nan_a, logical_not(nan_b)), value_first)
                             : logical_or(logical_and(logical_not(nan_a), nan_b), value_first);
    value_tie = logical_or(value_tie, logical_and(nan_a, nan_b));
  }
  const Tensor ordered = logical_or(value_first, logical_and(value_tie, lt(a.i, b.i)));
  return logical_and(logical_not(pad_a), logical_or(pad_b, ordered));
}

// Sort permutation of the rows of x [rows, n]: int64 [rows, n].
Tensor bitonic_order(const Tensor& x, bool descending) {
  const int64_t rows = x.size(0), n = x.size(1);
  const int64_t m = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(n, 1))));
  const bool floating = is_floating(x.dtype());
  Keys k{x, arange(0, static_cast<double>(n), 1, DType::i64, x.device()).reshape({1, n}).expand({rows, n})};
  if (m > n) {  // pad to a power of two; the padding's positions mark it
    k.v = cat({k.v, zeros({rows, m - n}, x.dtype(), x.device())}, 1);
    k.i = cat({k.i, arange(static_cast<double>(n), static_cast<double>(m), 1, DType::i64, x.device()).reshape({1, m - n}).expand({rows, m - n})}, 1);
  }
  for (int64_t size = 2; size <= m; size *= 2) {
    for (int64_t j = size / 2; j >= 1; j /= 2) {
      // Pairs (i, i + j) are [.., 0, :] and [.., 1, :] of [rows, m / 2j, 2, j]; block b of the
      // view sorts ascending when bit `size` of its first position is 0.
      // (Computed on the device: no host upload per pass.)
      const int64_t blocks = m / (2 * j);
      const Tensor block = arange(0, static_cast<double>(blocks), 1, DType::i64, x.device());
      const Tensor ascending = eq(remainder(floor_divide(block, size / (2 * j)), 2), 0).reshape({1, blocks, 1});
      const Tensor v = k.v.reshape({rows, blocks, 2, j}), i = k.i.reshape({rows, blocks, 2, j});
      const Keys lo{v.select(2, 0), i.select(2, 0)}, hi{v.select(2, 1), i.select(2, 1)};
      const Tensor swap = where(ascending, before(hi, lo, n, descending, floating), before(lo, hi, n, descending, floating));
      k.v = stack({where(swap, hi.v, lo.v), where(swap, lo.v, hi.v)}, 2).reshape({rows, m});
      k.i = stack({where(swap, hi.i, lo.i), where(swap, lo.i, hi.i)}, 2).reshape({rows, m});
    }
  }
  return m > n ? k.i.narrow(1, 0, n) : k.i;
}
}  // namespace

ValuesIndices sort(const Tensor& x, int64_t axis, bool descending) {
  detail::check_defined(x, "sort");
  TESSERA_CHECK(x.dtype() != DType::boolean, "sort", "not supported for dtype bool (sort x.to(int8))");
  if (x.dim() == 0) {
    normalize_axis(axis, 0, "sort");
    return {x, zeros({}, DType::i64, x.device())};
  }
  const int64_t a = normalize_axis(axis, x.dim(), "sort"), n = x.size(a);
  if (x.numel() == 0) return {x, zeros(x.shape(), DType::i64, x.device())};
  Tensor order;
  {
    NoGradGuard no_grad;
    const Tensor rows = x.detach().transpose(a, x.dim() - 1).contiguous();
    order = bitonic_order(rows.reshape({-1, n}), descending).reshape(rows.shape()).transpose(a, x.dim() - 1).contiguous();
  }
  return {take_along_axis(x, order, a), order};
}

ValuesIndices topk(const Tensor& x, int64_t k, int64_t axis, bool largest) {
  detail::check_defined(x, "topk");
  const int64_t a = normalize_axis(axis, std::max<int64_t>(x.dim(), 1), "topk"), n = x.dim() == 0 ? 1 : x.size(a);
  TESSERA_CHECK(k >= 0 && k <= n, "topk", "k ", k, " is out of range for ", n, " elements along axis ", a, " of ", shape_str(x.shape()));
  ValuesIndices s = sort(x, a, largest);
  if (x.dim() == 0) return s;
  return {s.values.narrow(a, 0, k), s.indices.narrow(a, 0, k).contiguous()};
}

namespace {
// Hillis-Steele: after the step of distance d, element t combines elements t - 2d + 1 .. t.
template <class Combine> void doubling_scan(std::vector<Tensor>& state, int64_t axis, Combine combine) {
  const int64_t n = state[0].size(axis);
  for (int64_t d = 1; d < n; d *= 2) {
    std::vector<Tensor> earlier, later;
    for (const Tensor& t : state) {
      earlier.push_back(t.narrow(axis, 0, n - d));
      later.push_back(t.narrow(axis, d, n - d));
    }
    const std::vector<Tensor> merged = combine(earlier, later);
    for (size_t s = 0; s < state.size(); ++s) state[s] = cat({state[s].narrow(axis, 0, d), merged[s]}, axis);
  }
}

ValuesIndices cumulative_extreme(const Tensor& x, int64_t axis, bool is_max, const char* op) {
  detail::check_defined(x, op);
  TESSERA_CHECK(x.dtype() != DType::boolean, op, "not supported for dtype bool");
  if (x.dim() == 0) {
    normalize_axis(axis, 0, op);
    return {x, zeros({}, DType::i64, x.device())};
  }
  const int64_t a = normalize_axis(axis, x.dim(), op);
  Shape ishape(static_cast<size_t>(x.dim()), 1);
  ishape[static_cast<size_t>(a)] = x.size(a);
  std::vector<Tensor> state;
  {
    NoGradGuard no_grad;
    state = {x.detach(), arange(0, static_cast<double>(x.size(a)), 1, DType::i64, x.device()).reshape(ishape).expand(x.shape())};
    const bool floating = is_floating(x.dtype());
    doubling_scan(state, a, [&](const std::vector<Tensor>& e, const std::vector<Tensor>& l) {
      // The later element wins ties (PyTorch returns the last index reaching the extreme); a NaN
      // wins from where it appears on.
      Tensor later = is_max ? ge(l[0], e[0]) : le(l[0], e[0]);
      if (floating) later = logical_and(logical_or(later, isnan(l[0])), logical_not(logical_and(isnan(e[0]), logical_not(isnan(l[0])))));
      return std::vector<Tensor>{where(later, l[0], e[0]), where(later, l[1], e[1])};
    });
  }
  const Tensor indices = state[1].contiguous();
  return {take_along_axis(x, indices, a), indices};
}
}  // namespace

Tensor argsort(const Tensor& x, int64_t axis, bool descending) {
  detail::check_defined(x, "argsort");
  TESSERA_CHECK(x.dtype() != DType::boolean, "argsort", "not supported for dtype bool (argsort x.to(int8))");
  NoGradGuard no_grad;  // indices carry no gradient
  return sort(x.detach(), axis, descending).indices;
}

Tensor cumprod(const Tensor& x_in, int64_t axis) {
  detail::check_defined(x_in, "cumprod");
  // Integers and booleans multiply in int64, as cumsum accumulates them (and as PyTorch does).
  const Tensor x = is_floating(x_in.dtype()) ? x_in : x_in.to(DType::i64);
  if (x.dim() == 0) {
    normalize_axis(axis, 0, "cumprod");
    return x;
  }
  const int64_t a = normalize_axis(axis, x.dim(), "cumprod");
  std::vector<Tensor> state = {x};
  doubling_scan(state, a, [](const std::vector<Tensor>& e, const std::vector<Tensor>& l) { return std::vector<Tensor>{mul(e[0], l[0])}; });
  return state[0];
}

ValuesIndices cummax(const Tensor& x, int64_t axis) { return cumulative_extreme(x, axis, true, "cummax"); }
ValuesIndices cummin(const Tensor& x, int64_t axis) { return cumulative_extreme(x, axis, false, "cummin"); }

}  // namespace tessera
