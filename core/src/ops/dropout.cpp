// dropout and dropout_add: one Philox-keyed kernel, its mask recomputed in the backward.
#include "tessera/ops/nn.h"

#include <cmath>

#include "autograd/record.h"
#include "conv_internal.h"
#include "dispatch.h"
#include "tessera/autocast.h"
#include "tessera/graph.h"
#include "tessera/runtime.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/indexing.h"
#include "tessera/ops/reduction.h"
#include "tessera/ops/shape_ops.h"

namespace tessera {

using detail::check_size2;
using detail::out_size;
using detail::run_kernel;

namespace {
// out = residual + mask(seed, offset) * x / (1 - p), one kernel.
Tensor run_dropout_add(const Tensor& x, const Tensor& residual, double p, uint64_t seed, uint64_t offset) {
  OpAttrs attrs;
  attrs.dropout_p = p;
  attrs.seed = seed;
  attrs.offset = offset;
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  const Tensor in[2] = {x.contiguous(), residual.defined() ? residual.contiguous() : Tensor()};
  if (out.numel() > 0) detail::run_kernel(OpId::DropoutAdd, x.device(), in, std::span<Tensor>(&out, 1), attrs);
  return out;
}
}  // namespace

Tensor dropout_add(const Tensor& x, const Tensor& residual, double p, bool training, Generator* gen) {
  detail::check_defined(x, "dropout");
  TESSERA_CHECK(p >= 0 && p <= 1, "dropout", "p must be in [0, 1], got ", p);
  TESSERA_CHECK(is_floating(x.dtype()), "dropout", "expected a floating dtype, got ", x.dtype());
  if (residual.defined()) {
    TESSERA_CHECK(residual.shape() == x.shape() && is_floating(residual.dtype()), "dropout_add", "residual ", shape_str(residual.shape()),
                  " ", residual.dtype(), " does not match input ", shape_str(x.shape()), " ", x.dtype());
    detail::common_device({&x, &residual}, "dropout_add");
    // Mixed precision: a bf16 sublayer output added to an f32 residual stream is computed in the
    // promoted dtype, as `residual + dropout(x)` would be (the residual stream stays f32).
    if (residual.dtype() != x.dtype()) {
      const DType t = promote_types(x.dtype(), residual.dtype());
      return dropout_add(x.to(t), residual.to(t), p, training, gen);
    }
  }
  const auto plus_residual = [&](const Tensor& y) { return residual.defined() ? add(residual, y) : y; };
  if (!training || p == 0) return plus_residual(x);
  if (p == 1) return plus_residual(mul(x, 0.0));
  if (!fused_kernels()) {  // the reference composition: a stored mask and two multiplies
    const Tensor mask = bernoulli(x.shape(), 1.0 - p, x.dtype(), x.device(), gen);
    return plus_residual(mul(x, mul(mask, 1.0 / (1.0 - p))));
  }
  Generator& g = gen ? *gen : default_generator();
  const uint64_t seed = g.seed(), offset = g.next_offset();
  TESSERA_CHECK(!detail::graph_capturing(), "dropout",
                "random ops cannot be captured in a graph (their Philox seed and offset are launch "
                "arguments: every replay would draw the same numbers)");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = run_dropout_add(x.detach(), residual.defined() ? residual.detach() : Tensor(), p, seed, offset);
  }
  if (autograd::needs_grad({&x, &residual})) {
    autograd::record("dropout_add", {x, residual}, out, [p, seed, offset, has_residual = residual.defined()](const Tensor& g) {
      return std::vector<Tensor>{run_dropout_add(g, Tensor(), p, seed, offset), has_residual ? g : Tensor()};
    });
  }
  return out;
}

}  // namespace tessera
