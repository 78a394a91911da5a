// Megatron-style tensor-parallel layers over a process group: the f/g conjugate functions as
// autograd nodes around blocking collectives, the split Linear layers, the vocabulary-split
// embedding and cross-entropy.
#include "tessera/nn/tensor_parallel.h"

#include <cmath>

#include "tessera/autograd_function.h"
#include "tessera/nn/init.h"

namespace tessera::nn::tp {
namespace {

int64_t shard(int64_t n, const dist::ProcessGroup& g, const char* layer, const char* what) {
  TESSERA_CHECK(n % g.world_size() == 0, layer, what, " ", n, " does not divide across ", g.world_size(), " ranks");
  return n / g.world_size();
}

Tensor all_reduced(const Tensor& x, dist::ProcessGroup& g, dist::ReduceOp op = dist::ReduceOp::sum) {
  Tensor out = x.detach().contiguous().clone();
  g.all_reduce(out, op)->wait();
  return out;
}

}  // namespace

Tensor copy_to_region(const Tensor& x, dist::ProcessGroup& group) {
  Tensor out = x.detach();
  dist::ProcessGroup* g = &group;
  autograd::attach_backward("tp.copy_to_region", {x}, out, [g](const Tensor& grad) { return std::vector<Tensor>{all_reduced(grad, *g)}; });
  return out;
}

Tensor reduce_from_region(const Tensor& x, dist::ProcessGroup& group) {
  Tensor out = all_reduced(x, group);
  autograd::attach_backward("tp.reduce_from_region", {x}, out, [](const Tensor& grad) { return std::vector<Tensor>{grad}; });
  return out;
}

Tensor gather_from_region(const Tensor& x, dist::ProcessGroup& group) {
  TESSERA_CHECK(x.dim() >= 1, "tp.gather_from_region", "needs at least one axis, got a scalar");
  const int64_t w = group.world_size(), k = x.size(-1), r = group.rank();
  Tensor buffer = empty({w * x.numel()}, x.dtype(), x.device());
  group.all_gather(buffer, x.detach().contiguous())->wait();
  Shape stacked{w};
  for (int64_t d = 0; d < x.dim(); ++d) stacked.push_back(x.size(d));
  std::vector<int64_t> order;  // [w, A..., k] -> [A..., w, k]
  for (int64_t d = 1; d < x.dim(); ++d) order.push_back(d);
  order.push_back(0);
  order.push_back(x.dim());
  Shape whole(x.shape().begin(), x.shape().end() - 1);
  whole.push_back(w * k);
  Tensor out = buffer.reshape(stacked).permute(order).contiguous().reshape(whole);
  autograd::attach_backward("tp.gather_from_region", {x}, out,
                            [r, k](const Tensor& grad) { return std::vector<Tensor>{grad.narrow(-1, r * k, k)}; });
  return out;
}

SplitLinear::SplitLinear(const char* layer, int64_t in, int64_t out, int axis, std::shared_ptr<dist::ProcessGroup> group, bool with_bias,
                         Placement p)
    : layer_(layer), group_(std::move(group)), in_(in), out_(out), axis_(axis) {
  TESSERA_CHECK(group_ != nullptr && in > 0 && out > 0, layer_, "needs a process group and positive sizes");
  const int64_t local = shard(axis_ == 0 ? out : in, *group_, layer_, axis_ == 0 ? "output features" : "input features");
  weight = init::kaiming_uniform(axis_ == 0 ? Shape{local, in} : Shape{out, local}, in, init::kDefaultA, p.dtype, p.device);
  if (with_bias) bias = init::fan_in_uniform({axis_ == 0 ? local : out}, in, p.dtype, p.device);
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

void SplitLinear::from_full(const Tensor& w, const Tensor& b) {
  TESSERA_CHECK(w.dim() == 2 && w.size(0) == out_ && w.size(1) == in_, layer_, "from_full: weight ", shape_str(w.shape()), " is not [",
                out_, ", ", in_, "]");
  const int64_t local = weight.size(axis_), start = group_->rank() * local;
  const NoGradGuard no_grad;
  weight.copy_(w.narrow(axis_, start, local));
  if (bias.defined() && b.defined()) bias.copy_(axis_ == 0 ? b.narrow(0, start, local) : b);
}

std::string SplitLinear::describe() const {
  return detail::concat(layer_, "(", in_, ", ", out_, ", rank ", group_->rank(), " holds ", weight.size(axis_), ")");
}

ColumnParallelLinear::ColumnParallelLinear(int64_t in, int64_t out, std::shared_ptr<dist::ProcessGroup> group, bool with_bias,
                                           bool gather_output, Placement p)
    : SplitLinear("ColumnParallelLinear", in, out, 0, std::move(group), with_bias, p), gather_output_(gather_output) {}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  const Tensor y = linear(copy_to_region(x, *group_), weight, bias);
  return gather_output_ ? gather_from_region(y, *group_) : y;
}

RowParallelLinear::RowParallelLinear(int64_t in, int64_t out, std::shared_ptr<dist::ProcessGroup> group, bool with_bias, Placement p)
    : SplitLinear("RowParallelLinear", in, out, 1, std::move(group), with_bias, p) {}

Tensor RowParallelLinear::forward(const Tensor& x) {
  TESSERA_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "RowParallelLinear", "input ", shape_str(x.shape()),
                " does not end in this rank's ", weight.size(1), " input features");
  const Tensor y = reduce_from_region(linear(x, weight), *group_);
  return bias.defined() ? add(y, bias) : y;
}

VocabParallelEmbedding::VocabParallelEmbedding(int64_t vocab, int64_t dim, std::shared_ptr<dist::ProcessGroup> group, Placement p)
    : group_(std::move(group)), vocab_(vocab), dim_(dim) {
  TESSERA_CHECK(group_ != nullptr && vocab > 0 && dim > 0, "VocabParallelEmbedding", "needs a process group and positive sizes");
  weight = randn({shard(vocab, *group_, "VocabParallelEmbedding", "vocabulary"), dim}, p.dtype, p.device);
  register_parameter("weight", &weight);
}

void VocabParallelEmbedding::from_full(const Tensor& w) {
  TESSERA_CHECK(w.dim() == 2 && w.size(0) == vocab_ && w.size(1) == dim_, "VocabParallelEmbedding", "from_full: weight ",
                shape_str(w.shape()), " is not [", vocab_, ", ", dim_, "]");
  const NoGradGuard no_grad;
  weight.copy_(w.narrow(0, group_->rank() * weight.size(0), weight.size(0)));
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  const int64_t local = weight.size(0), start = group_->rank() * local;
  const Tensor mine = logical_and(ge(ids, start), lt(ids, start + local));
  const Tensor rows = embedding(weight, where(mine, sub(ids, start), 0));
  return reduce_from_region(mul(rows, mine.to(weight.dtype()).unsqueeze(-1)), *group_);
}

std::string VocabParallelEmbedding::describe() const {
  return detail::concat("VocabParallelEmbedding(", vocab_, ", ", dim_, ", rank ", group_->rank(), " holds ", weight.size(0), ")");
}

Tensor vocab_parallel_cross_entropy(const Tensor& local_logits, const Tensor& target, dist::ProcessGroup& group) {
  TESSERA_CHECK(local_logits.dim() == 2 && target.dim() == 1 && target.size(0) == local_logits.size(0), "vocab_parallel_cross_entropy",
                "logits ", shape_str(local_logits.shape()), " and target ", shape_str(target.shape()), " must be [N, V/world] and [N]");
  const int64_t local = local_logits.size(1), start = group.rank() * local;
  // The row maxima over the whole vocabulary, for stability only (no gradient, as in Megatron).
  const Tensor row_max = all_reduced(amax(local_logits.detach(), {1}, true), group, dist::ReduceOp::max);
  const Tensor shifted = sub(local_logits, row_max);
  const Tensor sum_exp = reduce_from_region(sum(exp(shifted), {1}, true), group);
  const Tensor mine = logical_and(ge(target, start), lt(target, start + local));
  const Tensor index = where(mine, sub(target, start), 0).unsqueeze(1);
  const Tensor picked = reduce_from_region(mul(gather(shifted, 1, index), mine.to(shifted.dtype()).unsqueeze(1)), group);
  return mean(sub(log(sum_exp), picked));
}

}  // namespace tessera::nn::tp
