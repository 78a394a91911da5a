#pragma once
// Reduction functors shared by every backend: how to start, absorb an element, merge partial
// results and produce the output value. Floating sums/products accumulate in double (exact
// enough that f32 results are correctly rounded in practice); integers in uint64, whose
// wrap-around matches two's complement. max/min make NaN sticky, like torch.amax.
#include <cmath>
#include <limits>
#include <type_traits>

#include "convert.h"
#include "math.h"

namespace tessera::kernels {

template <class T> using wide_t = std::conditional_t<is_float_like_v<T>, double, uint64_t>;
// bool is widened so warp shuffles (which need at least 32 bits) can carry it.
template <class T> using extreme_t = std::conditional_t<std::is_same_v<T, bool>, int, compute_t<T>>;

template <class T, class Acc> TESSERA_HD_INLINE T finish_wide(Acc a) {
  if constexpr (std::is_same_v<Acc, uint64_t>) return convert<T, int64_t>(static_cast<int64_t>(a));
  else return convert<T>(a);
}

template <class T> struct SumReducer {
  using Acc = wide_t<T>;
  static TESSERA_HD Acc init() { return Acc(0); }
  static TESSERA_HD Acc merge(Acc a, Acc b) { return a + b; }
  static TESSERA_HD Acc step(Acc a, T v) { return a + static_cast<Acc>(static_cast<compute_t<T>>(v)); }
  static TESSERA_HD T finish(Acc a) { return finish_wide<T>(a); }
  TESSERA_HD Acc operator()(Acc a, Acc b) const { return merge(a, b); }
};

template <class T> struct ProdReducer {
  using Acc = wide_t<T>;
  static TESSERA_HD Acc init() { return Acc(1); }
  static TESSERA_HD Acc merge(Acc a, Acc b) { return a * b; }
  static TESSERA_HD Acc step(Acc a, T v) { return a * static_cast<Acc>(static_cast<compute_t<T>>(v)); }
  static TESSERA_HD T finish(Acc a) { return finish_wide<T>(a); }
  TESSERA_HD Acc operator()(Acc a, Acc b) const { return merge(a, b); }
};

template <class T, bool kMax> struct ExtremeReducer {
  using Acc = extreme_t<T>;
  static TESSERA_HD Acc init() {
    if constexpr (std::is_floating_point_v<Acc>) return kMax ? -INFINITY : INFINITY;
    else return kMax ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
  }
  // NaN is sticky: once the accumulator is NaN no comparison replaces it. One select, no early
  // return, so a host loop of merges if-converts and vectorises (compares and a blend).
  static TESSERA_HD Acc merge(Acc a, Acc b) {
    const bool take = !kmath::isnan(a) && ((kMax ? b > a : b < a) || kmath::isnan(b));
    return take ? b : a;
  }
  static TESSERA_HD Acc step(Acc a, T v) { return merge(a, static_cast<Acc>(static_cast<compute_t<T>>(v))); }
  static TESSERA_HD T finish(Acc a) { return convert<T>(a); }
  TESSERA_HD Acc operator()(Acc a, Acc b) const { return merge(a, b); }
};
template <class T> using MaxReducer = ExtremeReducer<T, true>;
template <class T> using MinReducer = ExtremeReducer<T, false>;

}  // namespace tessera::kernels
