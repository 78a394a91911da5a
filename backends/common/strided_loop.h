#pragma once
// Host-side iteration over N tensors of one shape with arbitrary (byte) strides.
// Dimensions of size 1 are dropped and adjacent dimensions that are contiguous in every
// operand are merged, so a fully contiguous problem becomes one flat run; the body always
// receives runs along the innermost remaining dimension and picks its own fast path.
#include <algorithm>
#include <array>
#include <cstdint>

#include "tessera/error.h"
#include "tessera/tensor.h"

namespace tessera::backend_common {

inline constexpr int kMaxDims = 16;

template <int N> struct StridedPlan {
  int ndim = 0;                         // after coalescing; index 0 is the innermost
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};    // bytes
  char* base[N] = {};
  int64_t numel = 1;
};

/**
 * Plans iteration over `shape` for tensors whose element strides are `strides[k]`, data
 * pointers `base[k]` and element sizes `itemsize[k]`.
 */
template <int N>
StridedPlan<N> make_plan(const Shape& shape, const std::array<const Strides*, N>& strides,
                         const std::array<char*, N>& base, const std::array<int64_t, N>& itemsize) {
  StridedPlan<N> p;
  p.numel = tessera::numel(shape);
  for (int k = 0; k < N; ++k) p.base[k] = base[k];
  TESSERA_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "kernel", "tensors of rank ", shape.size(),
                " exceed the supported ", kMaxDims);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    const int i = p.ndim;
    bool merge = i > 0;
    for (int k = 0; k < N && merge; ++k) {
      merge = (*strides[k])[d] * itemsize[k] == p.strides[k][i - 1] * p.sizes[i - 1];
    }
    if (merge) {
      p.sizes[i - 1] *= shape[d];
      continue;
    }
    p.sizes[i] = shape[d];
    for (int k = 0; k < N; ++k) p.strides[k][i] = (*strides[k])[d] * itemsize[k];
    ++p.ndim;
  }
  return p;
}

/** Plan over tensors that all have `shape` (typically the output's). */
template <int N> StridedPlan<N> make_plan(const Shape& shape, const std::array<const Tensor*, N>& ts) {
  std::array<const Strides*, N> strides;
  std::array<char*, N> base;
  std::array<int64_t, N> size;
  for (int k = 0; k < N; ++k) {
    strides[k] = &ts[k]->strides();
    base[k] = static_cast<char*>(ts[k]->data_ptr());
    size[k] = static_cast<int64_t>(ts[k]->itemsize());
  }
  return make_plan<N>(shape, strides, base, size);
}

/**
 * Calls body(ptrs, inner_strides, count) for the runs covering linear positions
 * [begin, end) of the plan (positions counted innermost-fastest).
 */
template <int N, class Body> void for_range(const StridedPlan<N>& p, int64_t begin, int64_t end, Body&& body) {
  if (begin >= end) return;
  std::array<char*, N> ptr;
  if (p.ndim == 0) {
    int64_t zero[N] = {};
    for (int k = 0; k < N; ++k) ptr[k] = p.base[k];
    body(ptr.data(), zero, int64_t{1});
    return;
  }
  int64_t coord[kMaxDims];
  int64_t rem = begin;
  for (int k = 0; k < N; ++k) ptr[k] = p.base[k];
  for (int d = 0; d < p.ndim; ++d) {
    coord[d] = rem % p.sizes[d];
    rem /= p.sizes[d];
    for (int k = 0; k < N; ++k) ptr[k] += coord[d] * p.strides[k][d];
  }
  int64_t inner[N];
  for (int k = 0; k < N; ++k) inner[k] = p.strides[k][0];
  for (int64_t i = begin; i < end;) {
    const int64_t n = std::min(p.sizes[0] - coord[0], end - i);
    body(ptr.data(), inner, n);
    i += n;
    coord[0] += n;
    for (int k = 0; k < N; ++k) ptr[k] += n * p.strides[k][0];
    for (int d = 0; d + 1 < p.ndim && coord[d] == p.sizes[d]; ++d) {
      coord[d] = 0;
      ++coord[d + 1];
      for (int k = 0; k < N; ++k) ptr[k] += p.strides[k][d + 1] - p.sizes[d] * p.strides[k][d];
    }
  }
}

}  // namespace tessera::backend_common
