#pragma once
// Indexing ops. Index tensors are int64 or int32; out-of-range indices throw, naming the op,
// the offending index and the valid range. Negative indices are not wrapped.
#include "tessera/kernels/scatter.h"
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
/** In-place scatter_reduce with include_self (sum, prod, amax, amin; no autograd, like scatter_add_). */
Tensor& scatter_reduce_(Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, ScatterReduce reduce);
/** numpy.take_along_axis: like gather, but index broadcasts against x outside `axis`. */
Tensor take_along_axis(const Tensor& x, const Tensor& index, int64_t axis);
/** Integer labels -> one-hot rows of `num_classes` (int64, like PyTorch). */
Tensor one_hot(const Tensor& labels, int64_t num_classes);
/** Rows of `weight` [num, dim] picked by integer `indices` of any shape: [..., dim]. */
Tensor embedding(const Tensor& weight, const Tensor& indices);
/** embedding() whose row `padding_idx` gets no gradient (PyTorch's padding_idx; negative counts from the end). */
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx);
/**
 * x with x[indices[0], indices[1], ...] = values (accumulate: +=, repeated positions adding up),
 * as PyTorch's index_put: one integer index tensor per leading axis, broadcast together, values
 * broadcast to the indexed shape. Without accumulate, repeated positions keep one of their values.
 */
Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate = false);
/** x with src's slices along `axis` added at the positions in 1-D `index` (times alpha), as PyTorch's index_add. */
Tensor index_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, double alpha = 1.0);
/**
 * x with src[i][j] written at x[index[i][j]][j] (axis 0), as PyTorch's scatter. Where an index
 * repeats PyTorch leaves the result unspecified; here the repeated sources are summed.
 */
Tensor scatter(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src);
/**
 * PyTorch's scatter_reduce: x with each src element combined into x[..., index, ...] by `reduce`
 * (sum, mean, prod, amax, amin; NaN propagates through amax/amin). include_self=false leaves x
 * out of the reduction where src lands. Gradients for floating dtypes: amax/amin share it evenly
 * among the elements equal to the result, prod divides the result by each element (a single
 * zero gets the product of the others), as in PyTorch.
 */
Tensor scatter_reduce(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, ScatterReduce reduce,
                      bool include_self = true);

}  // namespace tessera
