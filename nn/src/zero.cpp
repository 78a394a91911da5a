#include "tessera/nn/zero.h"

#include "sharding.h"

#include "tessera/autograd.h"
#include "tessera/error.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/shape_ops.h"

namespace tessera::nn {

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, OptimOptions options, const Factory& make,
                                                 dist::ProcessGroup& group, dist::ReduceOp reduce)
    : params_(std::move(params)), group_(group), reduce_(reduce) {
  TESSERA_CHECK(!params_.empty(), "ZeroRedundancyOptimizer", "no parameters");
  for (const Tensor& p : params_) {
    TESSERA_CHECK(p.dtype() == params_.front().dtype() && p.device() == params_.front().device(), "ZeroRedundancyOptimizer",
                  "parameters must share one dtype and device: ", p.dtype(), " on ", p.device().str(), " vs ", params_.front().dtype(), " on ",
                  params_.front().device().str());
    TESSERA_CHECK(is_floating(p.dtype()), "ZeroRedundancyOptimizer", "expected floating parameters, got ", p.dtype());
    numel_ += p.numel();
  }
  const int64_t world = group.world_size();
  shard_ = (numel_ + world - 1) / world;
  detail::broadcast_tensors(group, params_);
  NoGradGuard no_grad;
  shard_param_ =
      detail::flatten_padded(params_, false, shard_ * world).narrow(0, shard_ * group.rank(), shard_).clone().set_requires_grad();
  inner_ = make({ParamGroup{{shard_param_}, options}});
  TESSERA_CHECK(inner_ != nullptr, "ZeroRedundancyOptimizer", "the factory returned no optimizer");
}

void ZeroRedundancyOptimizer::step() {
  NoGradGuard no_grad;
  const int64_t world = group_.world_size();
  const Tensor grads = detail::flatten_padded(params_, true, shard_ * world);
  Tensor mine = empty({shard_}, grads.dtype(), grads.device());
  group_.reduce_scatter(mine, grads, reduce_)->wait();
  shard_param_.set_grad(mine);
  inner_->step();
  Tensor all = empty({shard_ * world}, shard_param_.dtype(), shard_param_.device());
  group_.all_gather(all, shard_param_.detach())->wait();
  int64_t offset = 0;
  for (Tensor& p : params_) {
    Tensor dst = p.detach();
    dst.copy_(all.narrow(0, offset, p.numel()).reshape(p.shape()));
    offset += p.numel();
  }
}

void ZeroRedundancyOptimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
  shard_param_.set_grad(Tensor());
}

StateDict ZeroRedundancyOptimizer::state_dict() const {
  NoGradGuard no_grad;
  StateDict full;
  const int64_t world = group_.world_size();
  for (const auto& [key, t] : inner_->state_dict()) {
    if (key.rfind("state.", 0) != 0) {
      full[key] = t;  // steps, group hyper-parameters: the same on every rank
      continue;
    }
    Tensor all = empty({shard_ * world}, t.dtype(), t.device());
    group_.all_gather(all, t.contiguous())->wait();
    full[key] = all.narrow(0, 0, numel_).clone();
  }
  return full;
}

void ZeroRedundancyOptimizer::load_state_dict(const StateDict& state) {
  NoGradGuard no_grad;
  StateDict mine;
  const int64_t begin = shard_begin(), end = shard_end();
  for (const auto& [key, t] : state) {
    if (key.rfind("state.", 0) != 0) {
      mine[key] = t;
      continue;
    }
    TESSERA_CHECK(t.dim() == 1 && t.numel() == numel_, "ZeroRedundancyOptimizer load_state_dict", "state '", key, "' has shape ",
                  shape_str(t.shape()), ", expected [", numel_, "] (the gathered state of these parameters)");
    Tensor slice = zeros({shard_}, t.dtype(), t.device());
    if (end > begin) {
      Tensor dst = slice.narrow(0, 0, end - begin);
      dst.copy_(t.narrow(0, begin, end - begin));
    }
    mine[key] = slice;
  }
  inner_->load_state_dict(mine);
}

}  // namespace tessera::nn
