#pragma once
// What a backend kernel receives. The front-end has already validated, promoted, broadcast
// (inputs arrive as views with the output's shape where the op is elementwise) and allocated
// the outputs; a kernel only computes. Attributes are named fields, never raw bytes.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/dtype.h"
#include "tessera/kernels/activation.h"
#include "tessera/kernels/optim.h"
#include "tessera/kernels/scatter.h"
#include "tessera/ops/op_id.h"

namespace tessera {

class Tensor;

/** The parameters of a random op, each named for what it is (RandUniform: low, high; RandInt:
 *  low, high as integers; RandNormal: mean, stddev; Bernoulli: p). */
struct RandomAttrs {
  double low = 0.0, high = 1.0;
  double mean = 0.0, stddev = 1.0;
  double p = 0.5;  ///< the probability of a 1
};

/** Op attributes; each op reads only the fields its comment in op_list.inc names, and every
 *  field means one thing. */
struct OpAttrs {
  std::vector<int64_t> axes;  ///< reduction axes, sorted and unique
  int64_t axis = 0;           ///< single-axis ops (softmax, cumsum, gather, index_select, ...)
  double value = 0.0;         ///< Fill: the value
  RandomAttrs random;         ///< RandUniform, RandNormal, RandInt, Bernoulli
  double eps = 0.0;           ///< normalisation: added to the variance
  double dropout_p = 0.0;     ///< DropoutAdd, Attention: the probability an element is dropped
  double label_smoothing = 0.0;    ///< CrossEntropy
  int64_t ignore_index = -100;     ///< CrossEntropy: targets equal to it contribute no loss and no gradient
  double scale = 1.0;              ///< Attention: the factor on QK^T before the softmax
  bool causal = false;             ///< Attention: position i attends to positions <= i only
  bool count_include_pad = false;  ///< AvgPool2d: padding counts in the divisor
  uint64_t seed = 0;          ///< RNG key
  uint64_t offset = 0;        ///< RNG stream offset
  Activation activation = Activation::none;
  // Convolution and pooling geometry (height, width).
  std::array<int64_t, 2> kernel{1, 1};
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
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

/**
 * The dtypes the front-end hands op's kernel (after promotion: float-only ops never see an
 * integer), judged by kernel_dtype(): the reference (CPU) kernels accept exactly these.
 */
DTypeSet op_dtypes(OpId op);

/** The dtype that selects op's kernel instantiation: the data operand's (Where: a; the scatters and
 *  optimizer updates: the updated output; ops with no input: the output). */
DType kernel_dtype(OpId op, std::span<const Tensor> inputs, std::span<const Tensor> outputs);

/** A backend's kernels, indexed by OpId; nullptr means "not implemented on this backend". A
 *  kernel may refuse some of op_dtypes(op) (declared with refuse(), with the reason): the
 *  dispatcher then never calls it with them (Backend::supports). */
struct KernelTable {
  std::array<KernelFn, kOpCount> fns{};
  KernelFn& operator[](OpId op) { return fns[static_cast<size_t>(op)]; }
  KernelFn operator[](OpId op) const { return fns[static_cast<size_t>(op)]; }
  int count() const {
    int n = 0;
    for (auto f : fns) n += f != nullptr;
    return n;
  }

  struct Refusal {
    DTypeSet dtypes;
    const char* why = nullptr;  ///< a string literal
  };
  /** Declares that op's kernel does not take `dtypes`, and why. */
  void refuse(OpId op, DTypeSet dtypes, const char* why) { refusals[static_cast<size_t>(op)] = {dtypes, why}; }
  const Refusal& refusal(OpId op) const { return refusals[static_cast<size_t>(op)]; }
  std::array<Refusal, kOpCount> refusals{};
};

}  // namespace tessera
