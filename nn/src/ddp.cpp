#include "tessera/nn/ddp.h"

#include "sharding.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "tessera/autograd.h"
#include "tessera/error.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"

namespace tessera::nn {

namespace {
struct Bucket {
  std::vector<size_t> params;    // indices into State::params
  std::vector<int64_t> offsets;  // element offset of each in `flat`
  Tensor flat;                   // this step's local gradients, then their reduction
  std::vector<bool> got;
  size_t ready = 0;
  std::unique_ptr<dist::Work> work;
};
}  // namespace

struct DistributedDataParallel::State {
  dist::ProcessGroup& group;
  DdpOptions options;
  std::vector<Tensor> params;
  std::vector<std::pair<size_t, size_t>> place;  // per parameter: bucket, slot
  std::vector<Bucket> buckets;
  size_t next_launch = 0;
  bool sync = true;

  State(dist::ProcessGroup& g, DdpOptions o) : group(g), options(o) {}

  // Issues every bucket whose gradients are all in, in bucket order: every rank issues the
  // same all-reduces in the same order, whatever order its gradients arrived in.
  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].ready == buckets[next_launch].params.size()) {
      Bucket& b = buckets[next_launch++];
      b.work = group.all_reduce(b.flat, options.reduce);
    }
    for (size_t i = 0; i < next_launch; ++i) {
      if (buckets[i].work) buckets[i].work->test();  // MPI progresses only inside MPI calls
    }
  }

  void store(size_t param, const Tensor& local_grad) {
    const auto [bi, slot] = place[param];
    Bucket& b = buckets[bi];
    TESSERA_CHECK(bi >= next_launch, "DistributedDataParallel",
                  "a gradient arrived for a bucket already being reduced (a parameter used by two backward passes before "
                  "finish_gradient_sync?)");
    NoGradGuard no_grad;
    Tensor dst = b.flat.narrow(0, b.offsets[slot], params[param].numel());
    dst.copy_(local_grad.reshape({-1}));
    if (!b.got[slot]) b.got[slot] = true, ++b.ready;
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<Module> module, dist::ProcessGroup& group, DdpOptions options)
    : module_(std::move(module)), state_(std::make_shared<State>(group, options)) {
  TESSERA_CHECK(module_ != nullptr, "DistributedDataParallel", "no module");
  TESSERA_CHECK(options.bucket_bytes > 0, "DistributedDataParallel", "bucket_bytes must be positive, got ", options.bucket_bytes);
  State& s = *state_;
  s.params = module_->parameters();
  if (options.broadcast_parameters) {
    std::vector<Tensor> all = s.params;
    for (const auto& [name, b] : module_->named_buffers()) all.push_back(b);
    detail::broadcast_tensors(group, all);
  }
  // Buckets in reverse registration order (roughly the order backward produces gradients),
  // each of one device and dtype, closed when it would pass bucket_bytes.
  s.place.resize(s.params.size());
  std::vector<int64_t> sizes;
  for (size_t k = s.params.size(); k-- > 0;) {
    const Tensor& p = s.params[k];
    const int64_t bytes = p.numel() * static_cast<int64_t>(itemsize(p.dtype()));
    const bool fresh = s.buckets.empty() || sizes.back() + bytes > options.bucket_bytes ||
                       s.params[s.buckets.back().params.front()].device() != p.device() ||
                       s.params[s.buckets.back().params.front()].dtype() != p.dtype();
    if (fresh) s.buckets.emplace_back(), sizes.push_back(0);
    Bucket& b = s.buckets.back();
    s.place[k] = {s.buckets.size() - 1, b.params.size()};
    b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + s.params[b.params.back()].numel());
    b.params.push_back(k);
    sizes.back() += bytes;
  }
  for (Bucket& b : s.buckets) {
    const Tensor& first = s.params[b.params.front()];
    b.flat = zeros({b.offsets.back() + s.params[b.params.back()].numel()}, first.dtype(), first.device());
    b.got.assign(b.params.size(), false);
  }
  std::weak_ptr<State> weak = state_;
  for (size_t k = 0; k < s.params.size(); ++k) {
    s.params[k].register_hook([weak, k](const Tensor& g) -> Tensor {
      const std::shared_ptr<State> st = weak.lock();
      if (!st || !st->sync) return Tensor();
      // The gradient .grad() will hold after this backward: any accumulated under no_sync plus g.
      const Tensor old = st->params[k].grad();
      st->store(k, old.defined() ? add(old, g) : g);
      st->launch_ready();
      return Tensor();
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::finish_gradient_sync() {
  State& s = *state_;
  // Parameters without a gradient this step (unused branches) contribute their current .grad()
  // or zeros, so every rank still issues every bucket.
  for (size_t bi = s.next_launch; bi < s.buckets.size(); ++bi) {
    Bucket& b = s.buckets[bi];
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      if (b.got[slot]) continue;
      const Tensor& p = s.params[b.params[slot]];
      s.store(b.params[slot], p.grad().defined() ? p.grad() : zeros(p.shape(), p.dtype(), p.device()));
    }
  }
  s.launch_ready();
  NoGradGuard no_grad;
  for (Bucket& b : s.buckets) {
    b.work->wait();
    b.work.reset();
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const Tensor& p = s.params[b.params[slot]];
      p.set_grad(b.flat.narrow(0, b.offsets[slot], p.numel()).reshape(p.shape()).clone());
    }
    std::fill(b.got.begin(), b.got.end(), false);
    b.ready = 0;
  }
  s.next_launch = 0;
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.state_->sync) {
  ddp_.state_->sync = false;
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.state_->sync = previous_; }

void DistributedDataParallel::sync_buffers() {
  NoGradGuard no_grad;
  std::vector<std::unique_ptr<dist::Work>> works;
  for (const auto& [name, b] : module_->named_buffers()) {
    if (is_floating(b.dtype())) works.push_back(state_->group.all_reduce(b.detach(), dist::ReduceOp::mean));
  }
  for (auto& w : works) w->wait();
}

int64_t DistributedDataParallel::bucket_count() const { return static_cast<int64_t>(state_->buckets.size()); }
int DistributedDataParallel::rank() const { return state_->group.rank(); }
int DistributedDataParallel::world_size() const { return state_->group.world_size(); }
void DistributedDataParallel::barrier() { state_->group.barrier(); }

bool DistributedDataParallel::replicas_equal() { return detail::same_bits_on_every_rank(state_->group, module_->parameters()); }

double DistributedDataParallel::mean_over_ranks(double value) { return dist::mean_over_ranks(state_->group, value); }
bool DistributedDataParallel::any_rank(bool flag) { return dist::any_rank(state_->group, flag); }

DistributedSampler::DistributedSampler(int64_t size, int rank, int world_size, bool shuffle, uint64_t seed, bool drop_last)
    : size_(size), rank_(rank), world_(world_size), shuffle_(shuffle), drop_last_(drop_last), seed_(seed) {
  TESSERA_CHECK(size >= 0, "DistributedSampler", "dataset size must be non-negative, got ", size);
  TESSERA_CHECK(world_size > 0 && rank >= 0 && rank < world_size, "DistributedSampler", "rank ", rank, " out of range for world size ",
                world_size);
}

int64_t DistributedSampler::num_samples() const { return drop_last_ ? size_ / world_ : (size_ + world_ - 1) / world_; }

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order(static_cast<size_t>(size_));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle_) {
    std::mt19937_64 gen(seed_ + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(epoch_ + 1));
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[gen() % i]);  // same sequence on every platform
  }
  const int64_t total = num_samples() * world_;
  for (int64_t i = size_; i < total && size_ > 0; ++i) order.push_back(order[static_cast<size_t>(i - size_)]);  // pad by wrapping
  order.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  for (int64_t i = rank_; i < total; i += world_) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace tessera::nn
