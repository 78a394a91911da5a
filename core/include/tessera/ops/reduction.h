#pragma once
// Reductions. `axes` empty means "all axes". Results are deterministic for a given shape
// whatever the thread count (fixed-split trees). Integer/bool sums and prods give int64.
#include <optional>
#include <vector>

#include "tessera/tensor.h"

namespace tessera {

using Axes = std::vector<int64_t>;

Tensor sum(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
/** Float inputs only (like PyTorch); the mean of an empty set is NaN. */
Tensor mean(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
/** Throws on an empty reduction. NaN propagates. */
Tensor amax(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
/** Index (int64) of the first max along `axis`; over the flattened tensor when axis is none. */
Tensor argmax(const Tensor& x, std::optional<int64_t> axis = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> axis = std::nullopt, bool keepdim = false);
/** Values and int64 indices of a reduction along one axis (PyTorch's max(dim) / min(dim)). */
struct ValuesIndices {
  Tensor values, indices;
};
/** Max along `axis` and the index of its first occurrence; the gradient goes to that element. */
ValuesIndices max(const Tensor& x, int64_t axis, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t axis, bool keepdim = false);
/**
 * Sorts along `axis`: values and int64 indices, stable (equal values keep their order), NaN
 * after every number (before, descending), as torch.sort(stable=True). A bitonic network of
 * compare-exchange steps, log^2 n elementwise passes that run on every backend; the gradient
 * goes back through the indices.
 */
ValuesIndices sort(const Tensor& x, int64_t axis = -1, bool descending = false);
/** The int64 indices that sort x along `axis` (stable, NaN last; sort's indices), as torch.argsort(stable=True). */
Tensor argsort(const Tensor& x, int64_t axis = -1, bool descending = false);
/** The k largest (or smallest) along `axis` in order; ties keep the lower index first. */
ValuesIndices topk(const Tensor& x, int64_t k, int64_t axis = -1, bool largest = true);
/** Cumulative product along `axis` (a log n doubling scan of products; exact for zeros and signs). */
Tensor cumprod(const Tensor& x, int64_t axis);
/** Running maximum/minimum along `axis` and where it was last reached (PyTorch's cummax/cummin; NaN propagates). */
ValuesIndices cummax(const Tensor& x, int64_t axis);
ValuesIndices cummin(const Tensor& x, int64_t axis);
/** Variance with Bessel-style `correction` (1 = sample variance). */
Tensor var(const Tensor& x, const Axes& axes = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Axes& axes = {}, int64_t correction = 1, bool keepdim = false);
/** log(sum(exp(x))) computed stably; all -inf gives -inf. */
Tensor logsumexp(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
/** p-norm for p = 1, 2 or infinity (pass INFINITY). */
Tensor norm(const Tensor& x, double p = 2.0, const Axes& axes = {}, bool keepdim = false);
/** Bool results. */
Tensor any(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor all(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
/** Running sum along `axis` (integers accumulate in int64). */
Tensor cumsum(const Tensor& x, int64_t axis);
/** Numerically stable softmax along `axis`. */
Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);

}  // namespace tessera
