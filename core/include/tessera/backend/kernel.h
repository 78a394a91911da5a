#pragma once
// What a backend kernel receives. The front-end has already validated, promoted, broadcast
// (inputs arrive as views with the output's shape where the op is elementwise) and allocated
// the outputs; a kernel only computes. Attributes are named fields, never raw bytes.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/kernels/activation.h"
#include "tessera/kernels/optim.h"
#include "tessera/kernels/scatter.h"
#include "tessera/ops/op_id.h"

namespace tessera {

class Tensor;

/** Op attributes; each op reads only the fields its comment in op_list.inc names. */
struct OpAttrs {
  std::vector<int64_t> axes;  ///< reduction axes, sorted and unique
  int64_t axis = 0;           ///< single-axis ops
  double scalar = 0.0;        ///< fill value; rand low; randn mean; bernoulli p
  double scalar2 = 0.0;       ///< rand high; randn std
  uint64_t seed = 0;          ///< RNG key
  uint64_t offset = 0;        ///< RNG stream offset
  Activation activation = Activation::none;
  // Convolution and pooling geometry (height, width).
  std::array<int64_t, 2> kernel{1, 1};
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  bool flag = false;  ///< op-specific switch (avg_pool2d: count_include_pad)
  ScatterReduce reduce = ScatterReduce::sum;  ///< scatter_reduce: prod, amax or amin
  OptimizerAttrs optim;  ///< fused optimizer updates
};

struct KernelCall {
  OpId op;
  std::span<const Tensor> inputs;
  std::span<Tensor> outputs;
  const OpAttrs& attrs;
};

using KernelFn = void (*)(const KernelCall&);

/** A backend's kernels, indexed by OpId; nullptr means "not implemented on this backend". */
struct KernelTable {
  std::array<KernelFn, kOpCount> fns{};
  KernelFn& operator[](OpId op) { return fns[static_cast<size_t>(op)]; }
  KernelFn operator[](OpId op) const { return fns[static_cast<size_t>(op)]; }
  int count() const {
    int n = 0;
    for (auto f : fns) n += f != nullptr;
    return n;
  }
};

}  // namespace tessera
