#include "tessera/nn/fsdp.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "tessera/autograd.h"
#include "tessera/error.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduction.h"
#include "tessera/ops/shape_ops.h"

namespace tessera::nn {

namespace {
// A unit: parameters gathered and freed together. Its parameter tensors are views into `full`
// (world * shard elements, zero-padded past numel), whose storage holds memory only while the
// unit is gathered; `local` is this rank's slice, the tensor the optimizer steps.
struct Unit {
  std::vector<Tensor> params;
  std::vector<size_t> index;     // each parameter's position in module.parameters()
  std::vector<int64_t> offsets;  // each parameter's first element in `full`
  std::vector<bool> got;         // a gradient arrived since the last reduce-scatter
  int64_t numel = 0, shard = 0;
  Tensor full, local;
  std::unique_ptr<dist::Work> gather;  // in flight into `full`
  bool gathered = false;
};

struct PendingReduce {
  size_t unit;
  Tensor flat, out;
  std::unique_ptr<dist::Work> work;
};

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}
}  // namespace

struct FullyShardedDataParallel::State {
  dist::ProcessGroup& group;
  FsdpOptions options;
  std::vector<Unit> units;                // [0]: the root (every parameter outside the given units)
  std::vector<size_t> order, last_order;  // units in the order this (the last) forward ran them
  std::deque<PendingReduce> reduces;
  FsdpStats stats;

  State(dist::ProcessGroup& g, FsdpOptions o) : group(g), options(o) {}

  void count_gathered() {
    const auto n = std::count_if(units.begin(), units.end(), [](const Unit& u) { return u.gathered || u.gather; });
    stats.peak_gathered_units = std::max<int64_t>(stats.peak_gathered_units, n);
  }
  void issue(size_t u, bool ahead) {
    Unit& unit = units[u];
    if (unit.gathered || unit.gather || unit.numel == 0) return;
    unit.full.storage()->materialize();
    unit.gather = group.all_gather(unit.full, unit.local.detach());
    ++stats.all_gathers;
    if (ahead) ++stats.prefetched;
    count_gathered();
  }
  void gather(size_t u) {
    Unit& unit = units[u];
    if (unit.numel == 0) return;
    issue(u, false);
    if (unit.gather) unit.gather->wait(), unit.gather.reset();
    unit.gathered = true;
  }
  void release(size_t u) {
    Unit& unit = units[u];
    if (unit.gather) unit.gather->wait(), unit.gather.reset();
    if (unit.numel > 0) unit.full.storage()->release();
    unit.gathered = false;
  }
  // The unit whose forward ran just before (step -1) or after (+1) `u` in `in`.
  void prefetch_neighbour(const std::vector<size_t>& in, size_t u, int step) {
    if (!options.prefetch) return;
    const auto it = std::find(in.begin(), in.end(), u);
    if (it == in.end()) return;
    const auto pos = (it - in.begin()) + step;
    if (pos >= 0 && pos < static_cast<std::ptrdiff_t>(in.size())) issue(in[static_cast<size_t>(pos)], true);
  }

  void complete(PendingReduce& r) {
    r.work->wait();
    Unit& unit = units[r.unit];
    const Tensor old = unit.local.grad();
    unit.local.set_grad(old.defined() ? add(old, r.out) : r.out);
  }
  // The unit's gradients (zeros where none arrived) flattened and reduce-scattered; the full
  // gradients and, for a block, the gathered parameters are freed: every node that read them has
  // run once each parameter's gradient is accumulated.
  void reduce(size_t u) {
    NoGradGuard no_grad;
    Unit& unit = units[u];
    std::vector<Tensor> parts;
    for (const Tensor& p : unit.params) {
      parts.push_back((p.grad().defined() ? p.grad() : zeros(p.shape(), p.dtype(), p.device())).reshape({-1}));
      p.set_grad(Tensor());
    }
    const int64_t world = group.world_size();
    if (unit.shard * world > unit.numel) parts.push_back(zeros({unit.shard * world - unit.numel}, unit.local.dtype(), unit.local.device()));
    PendingReduce r{u, cat(parts, 0), empty({unit.shard}, unit.local.dtype(), unit.local.device()), nullptr};
    r.work = group.reduce_scatter(r.out, r.flat, options.reduce);
    ++stats.reduce_scatters;
    reduces.push_back(std::move(r));
    while (reduces.size() > 1) complete(reduces.front()), reduces.pop_front();  // at most two units' gradients in flight
    std::fill(unit.got.begin(), unit.got.end(), false);
    if (u != 0) release(u);
  }
  void grad_ready(size_t u, size_t k) {
    Unit& unit = units[u];
    unit.got[k] = true;
    if (std::all_of(unit.got.begin(), unit.got.end(), [](bool g) { return g; })) reduce(u);
  }
  void backward_begin(size_t u) {
    gather(u);
    prefetch_neighbour(order, u, -1);
  }
};

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<Module> module, dist::ProcessGroup& group,
                                                   std::vector<std::shared_ptr<Module>> units, FsdpOptions options)
    : module_(std::move(module)), state_(std::make_shared<State>(group, options)) {
  TESSERA_CHECK(module_ != nullptr, "FullyShardedDataParallel", "no module");
  State& s = *state_;
  const std::vector<Tensor> all = module_->parameters();
  TESSERA_CHECK(!all.empty(), "FullyShardedDataParallel", "the module has no parameters");
  if (options.broadcast_parameters) {
    NoGradGuard no_grad;
    std::vector<std::unique_ptr<dist::Work>> works;
    for (const Tensor& p : all) works.push_back(group.broadcast(p.detach(), 0));
    for (const auto& [name, b] : module_->named_buffers()) works.push_back(group.broadcast(b.detach(), 0));
    for (auto& w : works) w->wait();
  }
  // Each parameter to its unit (the root: 0), by tensor identity; tied parameters count once.
  std::map<const TensorImpl*, size_t> owner;
  s.units.resize(units.size() + 1);
  for (size_t u = 0; u < units.size(); ++u) {
    TESSERA_CHECK(units[u] != nullptr, "FullyShardedDataParallel", "unit ", u, " is null");
    for (const Tensor& p : units[u]->parameters()) {
      const auto [it, fresh] = owner.emplace(p.impl_ptr().get(), u + 1);
      TESSERA_CHECK(fresh || it->second == u + 1, "FullyShardedDataParallel", "a parameter of shape ", shape_str(p.shape()),
                    " belongs to units ", it->second - 1, " and ", u, " (units must not overlap)");
    }
  }
  std::map<const TensorImpl*, bool> placed;
  for (size_t i = 0; i < all.size(); ++i) {
    const TensorImpl* key = all[i].impl_ptr().get();
    if (placed[key]) continue;
    placed[key] = true;
    const auto it = owner.find(key);
    Unit& unit = s.units[it == owner.end() ? 0 : it->second];
    unit.params.push_back(all[i]);
    unit.index.push_back(i);
  }
  TESSERA_CHECK(placed.size() == owner.size() + s.units[0].params.size(), "FullyShardedDataParallel",
                "a unit's parameters are not parameters of the wrapped module (pass sub-modules of it)");
  NoGradGuard no_grad;
  const int64_t world = group.world_size();
  for (size_t u = 0; u < s.units.size(); ++u) {
    Unit& unit = s.units[u];
    std::vector<Tensor> parts;
    for (const Tensor& p : unit.params) {
      TESSERA_CHECK(p.dtype() == unit.params.front().dtype() && p.device() == unit.params.front().device(), "FullyShardedDataParallel",
                    "unit ", static_cast<int64_t>(u) - 1, " mixes ", p.dtype(), " on ", p.device().str(), " with ",
                    unit.params.front().dtype(), " on ", unit.params.front().device().str(), " (one dtype and device per unit)");
      TESSERA_CHECK(is_floating(p.dtype()), "FullyShardedDataParallel", "expected floating parameters, got ", p.dtype());
      unit.offsets.push_back(unit.numel);
      unit.numel += p.numel();
      parts.push_back(p.detach().contiguous().reshape({-1}));
    }
    unit.got.assign(unit.params.size(), false);
    if (unit.numel == 0) continue;
    unit.shard = (unit.numel + world - 1) / world;
    const Tensor& first = unit.params.front();
    if (unit.shard * world > unit.numel) parts.push_back(zeros({unit.shard * world - unit.numel}, first.dtype(), first.device()));
    unit.full = cat(parts, 0);
    unit.local = unit.full.narrow(0, unit.shard * group.rank(), unit.shard).clone().set_requires_grad();
    // The parameters become views of `full`, in place (the same tensor objects the module reads).
    for (size_t k = 0; k < unit.params.size(); ++k) {
      TensorImpl& impl = *unit.params[k].impl_ptr();
      impl.storage = unit.full.storage();
      impl.offset = unit.offsets[k];
      impl.strides = contiguous_strides(impl.shape);
      if (impl.autograd) impl.autograd->grad = Tensor();
    }
    s.release(u);
  }
  std::weak_ptr<State> weak = state_;
  for (size_t u = 0; u < s.units.size(); ++u) {
    for (size_t k = 0; k < s.units[u].params.size(); ++k) {
      s.units[u].params[k].register_post_accumulate_grad_hook([weak, u, k](const Tensor&) {
        if (auto st = weak.lock()) st->grad_ready(u, k);
      });
    }
    if (u == 0) continue;
    units[u - 1]->register_forward_pre_hook([weak, u](Module&) {
      auto st = weak.lock();
      if (!st) return;
      st->order.push_back(u);
      st->gather(u);
      st->prefetch_neighbour(st->last_order, u, +1);
    });
    units[u - 1]->register_forward_hook([weak, u](Module&, const Tensor& out) {
      auto st = weak.lock();
      if (!st) return;
      if (grad_enabled() && out.defined() && out.requires_grad()) {
        out.register_hook([weak, u](const Tensor&) {
          if (auto st2 = weak.lock()) st2->backward_begin(u);
          return Tensor();
        });
      }
      st->release(u);
    });
  }
}

FullyShardedDataParallel::~FullyShardedDataParallel() = default;

Tensor FullyShardedDataParallel::forward(const Tensor& x) {
  State& s = *state_;
  s.order.clear();
  s.gather(0);
  if (!s.last_order.empty() && s.options.prefetch) s.issue(s.last_order.front(), true);
  Tensor out = module_->forward(x);
  s.last_order = s.order;
  return out;
}

std::vector<Tensor> FullyShardedDataParallel::parameters() const {
  std::vector<Tensor> out;
  for (const Unit& u : state_->units) {
    if (u.numel > 0) out.push_back(u.local);
  }
  return out;
}

void FullyShardedDataParallel::finish_gradient_sync() {
  State& s = *state_;
  for (size_t u = 0; u < s.units.size(); ++u) {
    if (std::any_of(s.units[u].got.begin(), s.units[u].got.end(), [](bool g) { return g; })) s.reduce(u);
  }
  while (!s.reduces.empty()) s.complete(s.reduces.front()), s.reduces.pop_front();
  for (size_t u = 0; u < s.units.size(); ++u) s.release(u);
}

double FullyShardedDataParallel::clip_grad_norm_(double max_norm) {
  NoGradGuard no_grad;
  double local = 0;
  for (const Tensor& p : parameters()) {
    if (p.grad().defined()) local += sum(mul(p.grad(), p.grad()).to(DType::f64)).item<double>();
  }
  Tensor t = full({1}, local, DType::f64, kCPU);
  state_->group.all_reduce(t, dist::ReduceOp::sum)->wait();
  const double norm = std::sqrt(t.item<double>());
  if (max_norm > 0 && norm > max_norm) {
    for (const Tensor& p : parameters()) {
      if (p.grad().defined()) p.set_grad(mul(p.grad(), max_norm / (norm + 1e-6)));
    }
  }
  return norm;
}

StateDict FullyShardedDataParallel::full_state_dict() {
  State& s = *state_;
  for (size_t u = 0; u < s.units.size(); ++u) s.gather(u);
  StateDict out;
  for (const auto& [name, t] : module_->state_dict()) out[name] = t.detach().clone();
  for (size_t u = 0; u < s.units.size(); ++u) s.release(u);
  return out;
}

void FullyShardedDataParallel::load_full_state_dict(const StateDict& state) {
  State& s = *state_;
  NoGradGuard no_grad;
  for (Unit& unit : s.units) {
    if (unit.numel == 0) continue;
    unit.full.storage()->materialize();
    if (unit.full.numel() > unit.numel) unit.full.narrow(0, unit.numel, unit.full.numel() - unit.numel).zero_();
  }
  try {
    module_->load_state_dict(state);  // validates every key and shape before writing
  } catch (...) {
    for (size_t u = 0; u < s.units.size(); ++u) s.release(u);
    throw;
  }
  for (size_t u = 0; u < s.units.size(); ++u) {
    Unit& unit = s.units[u];
    if (unit.numel == 0) continue;
    Tensor dst = unit.local.detach();
    dst.copy_(unit.full.narrow(0, unit.shard * s.group.rank(), unit.shard));
    s.release(u);
  }
}

namespace {
// "state.<g>.<p>.<name>" -> (p, name) for group 0; nullopt for any other key.
std::optional<std::pair<size_t, std::string>> state_key(const std::string& key) {
  if (key.rfind("state.0.", 0) != 0) return std::nullopt;
  const size_t dot = key.find('.', 8);
  size_t p = 0;
  const auto [end, ec] = std::from_chars(key.data() + 8, key.data() + (dot == std::string::npos ? key.size() : dot), p);
  if (dot == std::string::npos || ec != std::errc() || end != key.data() + dot) return std::nullopt;
  return std::make_pair(p, key.substr(dot + 1));
}
}  // namespace

// The optimizer's parameters must be parameters(), in order, in one group: shard i is the i-th
// unit with parameters.
static std::vector<size_t> check_sharded_optimizer(const Optimizer& optimizer, const std::vector<Tensor>& shards,
                                                   const std::vector<Unit>& units) {
  TESSERA_CHECK(optimizer.param_groups().size() == 1 && optimizer.param_groups()[0].params.size() == shards.size(),
                "FullyShardedDataParallel", "the optimizer must have one parameter group over parameters() (", shards.size(), " shards)");
  for (size_t i = 0; i < shards.size(); ++i) {
    TESSERA_CHECK(optimizer.param_groups()[0].params[i].is_same(shards[i]), "FullyShardedDataParallel", "the optimizer's parameter ", i,
                  " is not shard ", i, " of parameters()");
  }
  std::vector<size_t> unit_of;
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].numel > 0) unit_of.push_back(u);
  }
  return unit_of;
}

StateDict FullyShardedDataParallel::optimizer_state_dict(const Optimizer& optimizer) {
  State& s = *state_;
  const std::vector<size_t> unit_of = check_sharded_optimizer(optimizer, parameters(), s.units);
  NoGradGuard no_grad;
  StateDict out;
  for (const auto& [key, t] : optimizer.state_dict()) {  // sorted: every rank gathers in the same order
    const auto parsed = state_key(key);
    if (!parsed) {
      out[key] = t;
      continue;
    }
    const Unit& unit = s.units[unit_of.at(parsed->first)];
    Tensor all = empty({unit.shard * s.group.world_size()}, t.dtype(), t.device());
    s.group.all_gather(all, t.contiguous())->wait();
    for (size_t k = 0; k < unit.params.size(); ++k) {
      out["state.0." + std::to_string(unit.index[k]) + "." + parsed->second] =
          all.narrow(0, unit.offsets[k], unit.params[k].numel()).reshape(unit.params[k].shape()).clone();
    }
  }
  return out;
}

void FullyShardedDataParallel::load_optimizer_state_dict(Optimizer& optimizer, const StateDict& state) {
  State& s = *state_;
  const std::vector<size_t> unit_of = check_sharded_optimizer(optimizer, parameters(), s.units);
  std::map<size_t, std::pair<size_t, size_t>> where;  // module parameter index -> (shard, position in its unit)
  for (size_t i = 0; i < unit_of.size(); ++i) {
    for (size_t k = 0; k < s.units[unit_of[i]].params.size(); ++k) where[s.units[unit_of[i]].index[k]] = {i, k};
  }
  NoGradGuard no_grad;
  StateDict mine;
  std::map<std::string, Tensor> flats;  // "state.0.<shard>.<name>" -> the unit's whole flat state
  for (const auto& [key, t] : state) {
    const auto parsed = state_key(key);
    if (!parsed) {
      mine[key] = t;
      continue;
    }
    const auto it = where.find(parsed->first);
    TESSERA_CHECK(it != where.end(), "FullyShardedDataParallel load_optimizer_state_dict", "key '", key,
                  "' refers to a parameter the module does not have");
    const auto [shard, k] = it->second;
    const Unit& unit = s.units[unit_of[shard]];
    TESSERA_CHECK(t.shape() == unit.params[k].shape(), "FullyShardedDataParallel load_optimizer_state_dict", "state '", key, "' has shape ",
                  shape_str(t.shape()), ", expected ", shape_str(unit.params[k].shape()));
    Tensor& flat = flats["state.0." + std::to_string(shard) + "." + parsed->second];
    if (!flat.defined())
      flat = zeros({unit.shard * s.group.world_size()},
                   unit.local.dtype() == DType::f16 || unit.local.dtype() == DType::bf16 ? DType::f32 : unit.local.dtype(),
                   unit.local.device());
    Tensor dst = flat.narrow(0, unit.offsets[k], t.numel());
    dst.copy_(t.reshape({-1}));
  }
  for (const auto& [key, flat] : flats) {
    const Unit& unit = s.units[unit_of[state_key(key)->first]];
    mine[key] = flat.narrow(0, unit.shard * s.group.rank(), unit.shard).clone();
  }
  optimizer.load_state_dict(mine);
}

int FullyShardedDataParallel::rank() const { return state_->group.rank(); }
int FullyShardedDataParallel::world_size() const { return state_->group.world_size(); }
int64_t FullyShardedDataParallel::unit_count() const { return static_cast<int64_t>(state_->units.size()); }
void FullyShardedDataParallel::barrier() { state_->group.barrier(); }
const FsdpStats& FullyShardedDataParallel::stats() const { return state_->stats; }
void FullyShardedDataParallel::reset_stats() { state_->stats = {}; }

double FullyShardedDataParallel::mean_over_ranks(double value) {
  Tensor t = full({1}, value, DType::f64, kCPU);
  state_->group.all_reduce(t, dist::ReduceOp::mean)->wait();
  return t.item<double>();
}

bool FullyShardedDataParallel::any_rank(bool flag) {
  Tensor t = full({1}, flag ? 1.0 : 0.0, DType::i32, kCPU);
  state_->group.all_reduce(t, dist::ReduceOp::max)->wait();
  return t.item<int32_t>() != 0;
}

}  // namespace tessera::nn
