#pragma once
// Shape ops that are not methods of Tensor: joining and splitting. View methods (reshape,
// permute, slice, expand, ...) are on Tensor itself.
#include <vector>

#include "tessera/tensor.h"

namespace tessera {

/** Joins tensors along an existing axis (dtypes promote; devices must match). */
Tensor cat(const std::vector<Tensor>& tensors, int64_t axis = 0);
/** Joins tensors along a new axis. */
Tensor stack(const std::vector<Tensor>& tensors, int64_t axis = 0);
/** Views of consecutive pieces of `size` along axis (the last may be smaller). */
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t axis = 0);
/** Views of pieces with the given sizes (must sum to the axis size). */
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis = 0);
/** `chunks` views of (nearly) equal size, like torch.chunk. */
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis = 0);
/** View of `x` broadcast to `shape`. */
Tensor broadcast_to(const Tensor& x, const Shape& shape);

}  // namespace tessera
