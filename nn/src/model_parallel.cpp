// The rank layout of pipeline x tensor x data parallel runs, and the GPT's step engine for them:
// which stage and which tensor-parallel shards this rank holds, the subgroups their
// communication uses, and the global gradient norm with every weight counted once.
#include "tessera/nn/model_parallel.h"

#include <cctype>
#include <cmath>
#include <set>
#include <sstream>

#include "sharding.h"
#include "tessera/autograd.h"
#include "tessera/backend/registry.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/tensor_parallel.h"
#include "tessera/nn/trainer.h"

namespace tessera::nn {

RankLayout RankLayout::of(int world, int rank, int pipeline, int tensor) {
  TESSERA_CHECK(pipeline >= 1 && tensor >= 1, "model parallel", "pipeline ", pipeline, " and tensor parallel ", tensor, " must be >= 1");
  const int group = pipeline * tensor;
  TESSERA_CHECK(world % group == 0, "model parallel", world, world == 1 ? " rank does not" : " ranks do not", " lay out as pipeline ",
                pipeline, " x tensor parallel ", tensor, ": each model replica takes ", group, " ranks, so launch a multiple of ", group,
                " (the replicas beyond the first train data parallel)");
  TESSERA_CHECK(rank >= 0 && rank < world, "model parallel", "rank ", rank, " of ", world);
  RankLayout l;
  l.world = world, l.pipeline = pipeline, l.tensor = tensor, l.data = world / group, l.rank = rank;
  l.tensor_rank = rank % tensor;
  l.replica = (rank / tensor) % l.data;
  l.stage = rank / (tensor * l.data);
  return l;
}

RankLayout RankLayout::in_process(int pipeline) {
  TESSERA_CHECK(pipeline >= 1, "model parallel", "pipeline ", pipeline, " must be >= 1");
  RankLayout l;
  l.pipeline = pipeline;
  return l;
}

int RankLayout::rank_of(int stage_, int replica_, int tensor_rank_) const { return (stage_ * data + replica_) * tensor + tensor_rank_; }

std::string RankLayout::describe() const {
  std::ostringstream os;
  if (world == 1) {
    os << "layout: one process holds the pipeline's " << pipeline << " stages, each on a device of its own where the backend has them\n";
    return os.str();
  }
  os << "layout: " << world << (world == 1 ? " rank" : " ranks") << " = pipeline " << pipeline << " x tensor parallel " << tensor
     << " x data parallel " << data << "\n";
  for (int s = 0; s < pipeline; ++s) {
    for (int d = 0; d < data; ++d) {
      os << "  stage " << s << ", replica " << d << ": rank" << (tensor > 1 ? "s " : " ");
      for (int t = 0; t < tensor; ++t) os << (t ? ", " : "") << rank_of(s, d, t);
      os << "\n";
    }
  }
  return os.str();
}

GPTModelParallel::GPTModelParallel(const GPT& whole, std::shared_ptr<dist::ProcessGroup> world, Device device,
                                   const GPTParallelOptions& options)
    : world_(std::move(world)) {
  const int w = world_ ? world_->world_size() : 1, r = world_ ? world_->rank() : 0;
  TESSERA_CHECK(options.pipeline > 1 || options.tensor > 1, "model parallel",
                "pipeline 1 x tensor parallel 1 is plain data parallelism: use DistributedDataParallel (--distributed)");
  TESSERA_CHECK(options.tensor == 1 || w > 1, "model parallel", "tensor parallel ", options.tensor, " needs ranks: launch under mpirun -n ",
                options.tensor * options.pipeline);
  layout_ = w == 1 ? RankLayout::in_process(options.pipeline) : RankLayout::of(w, r, options.pipeline, options.tensor);
  TESSERA_CHECK(options.pipeline == 1 || options.micro_batches >= 1, "model parallel", "micro-batches must be >= 1, got ",
                options.micro_batches);
  const GPTConfig& c = whole.config();
  TESSERA_CHECK(c.heads % options.tensor == 0 && c.vocab % options.tensor == 0, "model parallel", "tensor parallel ", options.tensor,
                " splits heads and vocabulary evenly: ", c.heads, " heads and a vocabulary of ", c.vocab, " do not divide by it");
  TESSERA_CHECK(whole.is_whole() || (w > 1 && options.pipeline > 1), "model parallel",
                "a GPT built in part (for one pipeline stage) splits only as a pipeline of ranks; ",
                w == 1 ? "in one process every stage needs its blocks" : "tensor parallelism alone needs every block");
  const RankLayout& l = layout_;
  const int64_t chunks = options.chunks, virtual_stages = options.pipeline * chunks, last = virtual_stages - 1;
  TESSERA_CHECK(chunks == 1 || options.pipeline > 1, "model parallel", options.chunks, " model chunks need a pipeline");
  chunks_ = chunks;
  TESSERA_CHECK(!options.zero3 || l.data > 1, "model parallel",
                "ZeRO-3 shards each stage's parameters over the data-parallel replicas, and ", w, w == 1 ? " process" : " ranks",
                " = pipeline ", options.pipeline, " x tensor parallel ", options.tensor, " leave one: launch a multiple of ",
                2 * options.pipeline * options.tensor, " ranks under mpirun, or drop ZeRO-3");
  std::string tied_name;  // this rank's side of the pipeline's tied embedding, if it holds one
  if (w == 1) {
    // One process: stage i on device i of the backend (emulated:0, emulated:1; the CPU has one).
    Backend* backend = find_backend(device.type);
    const int devices = backend ? std::max(1, backend->device_count()) : 1;
    // Interleaved: virtual stage v takes its turns as stage v mod S, on that stage's device.
    std::vector<Device> stage_devices;
    for (int64_t v = 0; v < virtual_stages; ++v)
      stage_devices.emplace_back(device.type, static_cast<int>((device.index + v % options.pipeline) % devices));
    GPTStages split = split_gpt(whole, virtual_stages);
    pipeline_ = std::make_unique<Pipeline>(split.stages, stage_devices, options.schedule, options.micro_batches, chunks);
    pipeline_->tie(0, split.embedding, last, split.head);
    local_ = std::make_shared<Sequential>(split.stages);
    for (int64_t v = 0; v < virtual_stages; ++v) {
      for (const auto& [name, t] : split.stages[static_cast<size_t>(v)]->named_parameters())
        if (!(v == last && name == split.head)) counted_once_.push_back(t);
    }
  } else {
    // Every split is a collective of all ranks: each is made (or not) alike everywhere.
    if (l.tensor > 1) tensor_group_ = world_->split(r / l.tensor, r);
    if (l.pipeline > 1) pipeline_group_ = world_->split(l.replica * l.tensor + l.tensor_rank, l.stage);
    if (l.data > 1) data_group_ = world_->split(l.stage * l.tensor + l.tensor_rank, l.replica);
    std::string tied_head;
    if (l.pipeline > 1) {
      // This rank's virtual stages only (`whole` may be the part built for them): chunk c is
      // virtual stage c x S + stage. Several chunks sit in one container, named by chunk.
      std::vector<int64_t> mine;
      for (int64_t c = 0; c < chunks; ++c) mine.push_back(c * l.pipeline + l.stage);
      GPTStages split = split_gpt(whole, virtual_stages, tensor_group_, mine);
      std::vector<ModulePtr> local_chunks;
      for (int64_t v : mine) local_chunks.push_back(split.stages[static_cast<size_t>(v)]);
      local_ = chunks == 1 ? local_chunks.front() : std::make_shared<Sequential>(local_chunks);
      pipeline_ = std::make_unique<Pipeline>(local_chunks, pipeline_group_, device, options.schedule, options.micro_batches);
      pipeline_->tie(0, split.embedding, last, split.head);
      const std::string prefix = chunks == 1 ? "" : std::to_string(chunks - 1) + ".";
      if (l.stage == l.pipeline - 1) tied_head = prefix + split.head;  // the last virtual stage is this rank's last chunk
      if (l.stage == 0) tied_name = (chunks == 1 ? "" : "0.") + split.embedding;
    } else {
      local_ = std::make_shared<tp::ParallelGPT>(whole, tensor_group_);
      local_->to(device);  // a whole GPT built on the host: only this rank's part reaches the device
    }
    for (const auto& [name, t] : local_->named_parameters()) {
      if (name == tied_head) continue;  // its gradient is the embedding's, counted on stage 0
      if (l.tensor_rank == 0 || detail::is_tensor_parallel_slice(name)) counted_once_.push_back(t);
    }
    if (!tied_head.empty()) tied_name = tied_head;
  }
  if (pipeline_) pipeline_->defer_tied_sync();  // once per optimizer step, in finish_gradient_sync()
  index_parameters(whole);
  local_groups_ = weight_decay_groups(*local_, options.optimizer);
  if (options.zero3) shard_over_replicas(options, tied_name);
}

void GPTModelParallel::shard_over_replicas(const GPTParallelOptions& options, const std::string& tied_name) {
  FsdpOptions fo;
  fo.param_groups = local_groups_;
  fo.reshard_after_use = options.zero3_reshard_after_use;
  fo.broadcast_parameters = false;  // every replica split the same whole GPT
  std::vector<ModulePtr> units;     // the blocks: a stage's "blocks.<l>", tp::ParallelGPT's "<l>"
  const auto add_blocks = [&units](const Module& m) {
    for (const auto& [name, child] : m.children()) {
      if (name.rfind("blocks.", 0) == 0 || std::isdigit(static_cast<unsigned char>(name[0]))) units.push_back(child);
    }
  };
  if (chunks_ > 1) {  // a container of chunks (each a stage): their blocks
    for (const auto& [name, chunk] : local_->children()) add_blocks(*chunk);
  } else {
    add_blocks(*local_);
  }
  for (const auto& [name, t] : local_->named_parameters()) {
    if (name == tied_name) fo.own_flat.push_back(t);
  }
  fsdp_ = std::make_unique<FullyShardedDataParallel>(local_, *data_group_, units, std::move(fo));
  // The tied embedding's gradient is summed between the stages on the shards, after their
  // reduce-scatter (the full gradients are gone by then).
  if (pipeline_) pipeline_->redirect_tied([this](const Tensor& weight) { return fsdp_->shard_of(weight); });
}

std::vector<ParamGroup> GPTModelParallel::param_groups() { return fsdp_ ? fsdp_->param_groups() : local_groups_; }

Tensor GPTModelParallel::loss_of(const Tensor& logits, const Tensor& targets) const {
  if (!tensor_group_) return next_token_loss(logits, targets);
  return tp::vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.to(logits.device()).reshape({-1}), *tensor_group_);
}

double GPTModelParallel::train_batch(const Batch& b, double scale) {
  TESSERA_CHECK(scale > 0, "model parallel", "loss scale must be positive, got ", scale);
  const auto scaled = [&](const Tensor& out, const Tensor& target) {
    const Tensor l = loss_of(out, target);
    return scale == 1.0 ? l : mul(l, scale);
  };
  if (pipeline_) {
    if (fsdp_) fsdp_->begin_forward();
    return pipeline_->train_step(b.x, b.y, scaled) / scale;
  }
  const Tensor l = loss_of(fsdp_ ? fsdp_->forward(b.x) : local_->forward(b.x), b.y);
  (scale == 1.0 ? l : mul(l, scale)).backward();
  return l.item<double>();
}

double GPTModelParallel::eval_batch(const Batch& b) {
  const NoGradGuard no_grad;
  const auto loss = [this](const Tensor& out, const Tensor& target) { return loss_of(out, target); };
  if (pipeline_) {
    if (fsdp_) fsdp_->begin_forward();
    return pipeline_->evaluate(b.x, b.y, loss);
  }
  return loss(fsdp_ ? fsdp_->forward(b.x) : local_->forward(b.x), b.y).item<double>();
}

void GPTModelParallel::finish_gradient_sync() {
  if (fsdp_) {  // the shards' gradients averaged over the replicas, then the tied pair's summed
    fsdp_->finish_gradient_sync();
    if (pipeline_) pipeline_->sync_tied_gradients();
    return;
  }
  if (pipeline_) pipeline_->sync_tied_gradients();
  if (data_group_) detail::average_gradients(*data_group_, local_->parameters());
}

double GPTModelParallel::clip_grad_norm_(double max_norm) {
  const NoGradGuard no_grad;
  double total = 0.0;
  if (fsdp_) {  // each replica holds its own slice of the gradients: nothing is counted twice across them
    std::set<const TensorImpl*> once;
    for (const Tensor& p : counted_once_) once.insert(p.impl_ptr().get());
    total = fsdp_->grad_square_sum([&once](const Tensor& p) { return once.count(p.impl_ptr().get()) > 0; });
  } else {
    for (const Tensor& p : counted_once_) {
      if (p.grad().defined()) total += sum(square(p.grad().to(DType::f64))).item<double>();
    }
  }
  if (world_ && world_->world_size() > 1) {
    Tensor t = full({1}, total, DType::f64, kCPU);
    world_->all_reduce(t, dist::ReduceOp::sum)->wait();
    total = t.item<double>();
    if (!fsdp_) total /= layout_.data;  // the replicas hold the same (averaged) gradients
  }
  const double norm = std::sqrt(total), coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (const Tensor& p : fsdp_ ? fsdp_->parameters() : local_->parameters()) {
      if (p.grad().defined()) p.grad().mul_(coef);
    }
  }
  return norm;
}

bool GPTModelParallel::any_rank(bool flag) { return world_ && world_->world_size() > 1 ? dist::any_rank(*world_, flag) : flag; }

double GPTModelParallel::mean_over_ranks(double value) {
  return world_ && world_->world_size() > 1 ? dist::mean_over_ranks(*world_, value) : value;
}

bool GPTModelParallel::replicas_equal() {
  if (fsdp_) return true;  // sharded: no rank holds a replica of another's part
  return !data_group_ || detail::same_bits_on_every_rank(*data_group_, local_->parameters());
}

void GPTModelParallel::barrier() {
  if (world_) world_->barrier();
}

}  // namespace tessera::nn
