// The losses: cross entropy (a fused kernel with label smoothing and ignore_index), nll, mse, l1
// and their reductions.
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
Tensor reduce_loss(const Tensor& per_item, Reduction reduction, const Tensor& count = Tensor()) {
  switch (reduction) {
    case Reduction::none:
      return per_item;
    case Reduction::sum:
      return sum(per_item);
    case Reduction::mean:
      return count.defined() ? div(sum(per_item), count) : mean(per_item);
  }
  return per_item;
}

// [N, C, d...] -> [N * d..., C] and targets to match.
std::pair<Tensor, Tensor> flatten_classes(const Tensor& logits, const Tensor& target, const char* op) {
  detail::check_defined(logits, op, "input");
  detail::check_index_dtype(target, op, "target");
  TESSERA_CHECK(logits.dim() >= 2, op, "input must be [N, C, ...], got ", shape_str(logits.shape()));
  detail::common_device({&logits, &target}, op);
  Shape want = logits.shape();
  want.erase(want.begin() + 1);
  TESSERA_CHECK(target.shape() == want, op, "target ", shape_str(target.shape()), " does not match input ", shape_str(logits.shape()),
                " (expected ", shape_str(want), ")");
  if (logits.dim() == 2) return {logits, target};
  std::vector<int64_t> order = {0};
  for (int64_t d = 2; d < logits.dim(); ++d) order.push_back(d);
  order.push_back(1);
  return {logits.permute(order).reshape({-1, logits.size(1)}), target.reshape({-1})};
}
}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target_in, Reduction reduction, double label_smoothing, int64_t ignore_index) {
  if (target_in.defined() && is_floating(target_in.dtype())) {  // class probabilities
    return cross_entropy(logits_in, target_in, Tensor(), reduction, label_smoothing, ignore_index);
  }
  auto [logits, target] = flatten_classes(autocast(logits_in, CastPolicy::f32), target_in, "cross_entropy");
  TESSERA_CHECK(is_floating(logits.dtype()), "cross_entropy", "expected floating logits, got ", logits.dtype());
  TESSERA_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy", "label_smoothing must be in [0, 1], got ", label_smoothing);
  const int64_t n = logits.size(0), c = logits.size(1);
  OpAttrs attrs;
  attrs.label_smoothing = label_smoothing;
  attrs.ignore_index = ignore_index;
  Tensor outs[2] = {empty({n}, logits.dtype(), logits.device()), empty({n, c}, logits.dtype(), logits.device())};
  const Tensor in[2] = {logits.detach().contiguous(), target.contiguous()};
  if (n > 0) run_kernel(OpId::CrossEntropy, logits.device(), in, outs, attrs);
  Tensor loss = outs[0];
  if (autograd::needs_grad({&logits})) {
    autograd::record("cross_entropy", {logits}, loss,
                     [logp = outs[1], t = in[1], label_smoothing, ignore_index, c, attrs](const Tensor& g) {
                       // d loss / d logits = softmax - smoothed one-hot target, zero on ignored rows.
                       if (fused_kernels()) {
                         Tensor grad = empty(logp.shape(), logp.dtype(), logp.device());
                         const Tensor in3[3] = {g.to(logp.dtype()).contiguous(), logp, t};
                         if (grad.numel() > 0)
                           detail::run_kernel(OpId::CrossEntropyBackward, logp.device(), in3, std::span<Tensor>(&grad, 1), attrs);
                         return std::vector<Tensor>{grad};
                       }
                       const Tensor classes = arange(c, t.dtype(), t.device());
                       const Tensor hot = eq(t.unsqueeze(1), classes).to(logp.dtype());
                       const Tensor target_dist = add(mul(hot, 1.0 - label_smoothing), label_smoothing / static_cast<double>(c));
                       const Tensor keep = ne(t, ignore_index).to(logp.dtype()).unsqueeze(1);
                       return std::vector<Tensor>{mul(mul(sub(exp(logp), target_dist), keep), g.unsqueeze(1))};
                     });
  }
  if (logits_in.dim() > 2 && reduction == Reduction::none) {
    Shape shape = logits_in.shape();
    shape.erase(shape.begin() + 1);
    loss = loss.reshape(shape);
  }
  const Tensor count = reduction == Reduction::mean ? sum(ne(target, ignore_index)).to(logits.dtype()) : Tensor();
  return reduce_loss(loss, reduction, count);
}

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& target_in, Reduction reduction, int64_t ignore_index) {
  auto [log_probs, target] = flatten_classes(autocast(log_probs_in, CastPolicy::f32), target_in, "nll_loss");
  const int64_t c = log_probs.size(1);
  const Tensor keep = ne(target, ignore_index);
  if (target.numel() > 0) {
    const int64_t lo = amin(where(keep, target, 0)).item<int64_t>(), hi = amax(where(keep, target, 0)).item<int64_t>();
    TESSERA_CHECK(lo >= 0 && hi < c, "nll_loss", "targets must lie in [0, ", c, "), got range [", lo, ", ", hi, "]");
  }
  const Tensor safe = where(keep, target, 0).unsqueeze(1);
  const Tensor picked = neg(take_along_axis(log_probs, safe, 1).squeeze(1));
  const Tensor per_item = mul(picked, keep.to(log_probs.dtype()));
  const Tensor count = reduction == Reduction::mean ? sum(keep).to(log_probs.dtype()) : Tensor();
  return reduce_loss(per_item, reduction, count);
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const Tensor input = autocast(input_in, CastPolicy::f32), target = autocast(target_in, CastPolicy::f32);
  TESSERA_CHECK(input.shape() == target.shape(), "mse_loss", "input ", shape_str(input.shape()), " and target ", shape_str(target.shape()),
                " differ");
  return reduce_loss(square(sub(input, target)), reduction);
}

Tensor l1_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const Tensor input = autocast(input_in, CastPolicy::f32), target = autocast(target_in, CastPolicy::f32);
  TESSERA_CHECK(input.shape() == target.shape(), "l1_loss", "input ", shape_str(input.shape()), " and target ", shape_str(target.shape()),
                " differ");
  return reduce_loss(abs(sub(input, target)), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits_in, const Tensor& target_in, Reduction reduction,
                                        const Tensor& pos_weight_in) {
  const Tensor logits = autocast(logits_in, CastPolicy::f32), target = autocast(target_in, CastPolicy::f32),
               pos_weight = autocast(pos_weight_in, CastPolicy::f32);
  TESSERA_CHECK(logits.shape() == target.shape(), "binary_cross_entropy_with_logits", "input ", shape_str(logits.shape()), " and target ",
                shape_str(target.shape()), " differ");
  // loss = (1 - t) x + w_t * softplus(-x), with w_t = 1 + (pos_weight - 1) t; softplus is stable.
  const Tensor sp = softplus(neg(logits));
  const Tensor weight_t = pos_weight.defined() ? add(mul(sub(pos_weight, 1.0), target), 1.0) : Tensor();
  const Tensor pos_term = weight_t.defined() ? mul(weight_t, sp) : sp;
  return reduce_loss(add(mul(sub(1.0, target), logits), pos_term), reduction);
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) { return dropout_add(x, Tensor(), p, training, gen); }

}  // namespace tessera
