// Cross entropy with class weights or probability targets, composed from log_softmax (the
// plain integer-target case keeps its fused kernel in losses.cpp). The formulas are PyTorch's,
// label smoothing included.
#include "dispatch.h"
#include "tessera/autocast.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/indexing.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/reduction.h"

namespace tessera {

namespace {
// `weight` [C] shaped to broadcast along the class axis 1 of a rank-`rank` tensor.
Tensor along_classes(const Tensor& weight, int64_t rank) {
  Shape shape(static_cast<size_t>(rank), 1);
  shape[1] = weight.size(0);
  return weight.reshape(shape);
}
}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, const Tensor& weight, Reduction reduction, double label_smoothing,
                     int64_t ignore_index) {
  constexpr const char* op = "cross_entropy";
  detail::check_defined(logits_in, op, "input");
  detail::check_defined(target, op, "target");
  detail::common_device({&logits_in, &target, &weight}, op);
  TESSERA_CHECK(logits_in.dim() >= 2, op, "input must be [N, C, ...], got ", shape_str(logits_in.shape()));
  TESSERA_CHECK(label_smoothing >= 0 && label_smoothing <= 1, op, "label_smoothing must be in [0, 1], got ", label_smoothing);
  const Tensor logits = autocast(logits_in, CastPolicy::f32);
  TESSERA_CHECK(is_floating(logits.dtype()), op, "expected floating logits, got ", logits.dtype());
  const int64_t c = logits.size(1);
  const bool weighted = weight.defined();
  if (weighted) {
    TESSERA_CHECK(weight.dim() == 1 && weight.size(0) == c, op, "weight must be [", c, "] (one per class), got ", shape_str(weight.shape()));
    TESSERA_CHECK(is_floating(weight.dtype()), op, "weight must be floating, got ", weight.dtype());
  }
  const Tensor w = weighted ? along_classes(weight.to(logits.dtype()), logits.dim()) : Tensor();
  const Tensor logp = log_softmax(logits, 1);
  if (is_floating(target.dtype())) {
    TESSERA_CHECK(target.shape() == logits.shape(), op, "probability target ", shape_str(target.shape()), " must match input ",
                  shape_str(logits.shape()));
    Tensor t = target.to(logits.dtype());
    if (label_smoothing > 0) t = add(mul(t, 1.0 - label_smoothing), label_smoothing / static_cast<double>(c));
    Tensor terms = mul(logp, t);
    if (weighted) terms = mul(terms, w);
    const Tensor per_item = neg(sum(terms, {1}));
    return reduction == Reduction::none ? per_item : reduction == Reduction::sum ? sum(per_item) : mean(per_item);
  }
  if (!weighted) return cross_entropy(logits_in, target, reduction, label_smoothing, ignore_index);
  Shape want = logits.shape();
  want.erase(want.begin() + 1);
  TESSERA_CHECK(target.shape() == want, op, "target ", shape_str(target.shape()), " does not match input ", shape_str(logits.shape()),
                " (expected ", shape_str(want), ")");
  const Tensor keep = ne(target, ignore_index);
  const Tensor safe = where(keep, target, 0);
  const Tensor keep_f = keep.to(logits.dtype());
  // w[y] per item (0 where ignored); index_select checks the targets' range.
  const Tensor wy = mul(index_select(weight.to(logits.dtype()), 0, safe.reshape({-1})).reshape(want), keep_f);
  const Tensor nll = mul(neg(take_along_axis(logp, safe.unsqueeze(1), 1).squeeze(1)), wy);
  Tensor per_item = nll;
  if (label_smoothing > 0) {
    const Tensor smooth = mul(neg(sum(mul(logp, w), {1})), keep_f);
    per_item = add(mul(nll, 1.0 - label_smoothing), mul(smooth, label_smoothing / static_cast<double>(c)));
  }
  if (reduction == Reduction::none) return per_item;
  return reduction == Reduction::sum ? sum(per_item) : div(sum(per_item), sum(wy));
}

}  // namespace tessera
