#pragma once
// Indexing ops. Index tensors are int64 or int32; out-of-range indices throw, naming the op,
// the offending index and the valid range. Negative indices are not wrapped.
#include "tessera/tensor.h"

namespace tessera {

/** Picks slices of `x` along `axis` at the positions in 1-D `index`. */
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index);
/** out[i][j][k] = x[index[i][j][k]][j][k] (axis 0); index has x's rank, its sizes <= x's. */
Tensor gather(const Tensor& x, int64_t axis, const Tensor& index);
/** Returns a copy of `x` with src[i][j] added at x[index[i][j]][j] (axis 0). */
Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src);
/** In-place scatter_add into `x`. */
Tensor& scatter_add_(Tensor& x, int64_t axis, const Tensor& index, const Tensor& src);
/** numpy.take_along_axis: like gather, but index broadcasts against x outside `axis`. */
Tensor take_along_axis(const Tensor& x, const Tensor& index, int64_t axis);
/** Integer labels -> one-hot rows of `num_classes` (int64, like PyTorch). */
Tensor one_hot(const Tensor& labels, int64_t num_classes);
/** Rows of `weight` [num, dim] picked by integer `indices` of any shape: [..., dim]. */
Tensor embedding(const Tensor& weight, const Tensor& indices);

}  // namespace tessera
