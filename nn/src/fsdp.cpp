#include "tessera/nn/fsdp.h"

#include "sharding.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <optional>
#include <string>

#include "tessera/autograd.h"
#include "tessera/error.h"
#include "tessera/nn/language_model.h"
#include "tessera/nn/layers.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduction.h"
#include "tessera/ops/shape_ops.h"

namespace tessera::nn {

namespace {
// One unit's parameters of one optimizer group, gathered and freed together. Its parameter
// tensors are views into `full` (world * shard elements, zero-padded past numel), whose storage
// holds memory only while gathered; `local` is this rank's slice, the tensor the optimizer steps.
struct Flat {
  size_t unit = 0, group = 0, own = 0;  // own: 1 + the index in FsdpOptions::own_flat, 0 for a shared flat
  std::vector<Tensor> params;
  std::vector<size_t> index;     // each parameter's position in its group of the unsharded model
  std::vector<int64_t> offsets;  // each parameter's first element in `full` (256-byte aligned: detail::aligned_offsets)
  std::vector<bool> got;         // a gradient arrived since the last reduce-scatter
  int64_t numel = 0, shard = 0;  // numel: the used length, alignment gaps included
  Tensor full, local;
  std::unique_ptr<dist::Work> gather;  // in flight into `full`
  bool gathered = false;
};

struct PendingReduce {
  size_t flat;
  Tensor grads, out;
  std::unique_ptr<dist::Work> work;
};
}  // namespace

struct FullyShardedDataParallel::State {
  dist::ProcessGroup& group;
  FsdpOptions options;
  std::vector<Flat> flats;                    // by unit (the root, 0, first), then group
  std::vector<std::vector<size_t>> of_unit;   // unit -> its flats
  std::vector<std::vector<size_t>> of_group;  // optimizer group -> its flats (the optimizer's order)
  std::vector<OptimOptions> group_options;
  std::vector<size_t> order, last_order;  // units in the order this (the last) forward ran them
  std::optional<PendingReduce> pending;   // the last flat's reduce-scatter, completed when the next is issued
  FsdpStats stats;
  int pinned = 0;  // live summon_full_params() guards: nothing is released meanwhile

  State(dist::ProcessGroup& g, FsdpOptions o) : group(g), options(std::move(o)) {}

  void count_gathered() {
    int64_t n = 0;
    for (const auto& fs : of_unit) {
      n += std::any_of(fs.begin(), fs.end(), [&](size_t f) { return flats[f].gathered || flats[f].gather; }) ? 1 : 0;
    }
    stats.peak_gathered_units = std::max(stats.peak_gathered_units, n);
  }
  bool issue_flat(size_t f) {
    Flat& flat = flats[f];
    if (flat.gathered || flat.gather) return false;
    flat.full.storage()->materialize();
    flat.gather = group.all_gather(flat.full, flat.local.detach());
    return true;
  }
  void issue(size_t u, bool ahead) {
    bool any = false;
    for (size_t f : of_unit[u]) any = issue_flat(f) || any;
    if (!any) return;
    ++stats.all_gathers;
    if (ahead) ++stats.prefetched;
    count_gathered();
  }
  void gather(size_t u) {
    issue(u, false);
    for (size_t f : of_unit[u]) {
      Flat& flat = flats[f];
      if (flat.gather) flat.gather->wait(), flat.gather.reset();
      flat.gathered = true;
    }
  }
  void release_flat(size_t f) {
    Flat& flat = flats[f];
    if (flat.gather) flat.gather->wait(), flat.gather.reset();
    if (pinned > 0) return;
    flat.full.storage()->release();
    flat.gathered = false;
  }
  void release(size_t u) {
    for (size_t f : of_unit[u]) release_flat(f);
  }
  // The unit whose forward ran just before (step -1) or after (+1) `u` in `in`.
  void prefetch_neighbour(const std::vector<size_t>& in, size_t u, int step) {
    if (!options.prefetch) return;
    const auto it = std::find(in.begin(), in.end(), u);
    if (it == in.end()) return;
    const auto pos = (it - in.begin()) + step;
    if (pos >= 0 && pos < static_cast<std::ptrdiff_t>(in.size())) issue(in[static_cast<size_t>(pos)], true);
  }

  void finish_pending() {
    if (!pending) return;
    pending->work->wait();
    Flat& flat = flats[pending->flat];
    const Tensor old = flat.local.grad();
    flat.local.set_grad(old.defined() ? add(old, pending->out) : pending->out);
    pending.reset();
  }
  // The flat's gradients (zeros where none arrived) reduce-scattered; the full gradients and, for
  // a block, the gathered parameters are freed: every node that read them has run once each
  // parameter's gradient is accumulated (a parameter's accumulator waits for all its readers).
  void reduce(size_t f) {
    NoGradGuard no_grad;
    Flat& flat = flats[f];
    PendingReduce r{f, detail::flatten_at(flat.params, flat.offsets, true, flat.shard * group.world_size()),
                    empty({flat.shard}, flat.local.dtype(), flat.local.device()), nullptr};
    for (const Tensor& p : flat.params) p.set_grad(Tensor());
    r.work = group.reduce_scatter(r.out, r.grads, options.reduce);
    ++stats.reduce_scatters;
    finish_pending();  // one flat's full gradients in flight besides the new one
    pending = std::move(r);
    std::fill(flat.got.begin(), flat.got.end(), false);
    if (flat.unit != 0) release_flat(f);
  }
  void grad_ready(size_t f, size_t k) {
    Flat& flat = flats[f];
    flat.got[k] = true;
    if (!options.reshard_after_use) return;  // reduced once, by finish_gradient_sync()
    if (std::all_of(flat.got.begin(), flat.got.end(), [](bool g) { return g; })) reduce(f);
  }
  // The units' order in one forward pass: `order` up to its first repeat. A pipeline stage runs
  // its units once per micro-batch; prefetching across the wrap (the first unit after the last)
  // would hold a unit gathered through the backward that usually comes next (1F1B).
  void keep_order() {
    std::set<size_t> seen;
    size_t n = 0;
    while (n < order.size() && seen.insert(order[n]).second) ++n;
    last_order.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n));
  }
  void begin_forward() {
    if (!order.empty()) keep_order();
    order.clear();
    gather(0);
    if (!last_order.empty() && options.prefetch) issue(last_order.front(), true);
  }
  void backward_begin(size_t u) {
    gather(u);
    prefetch_neighbour(order, u, -1);
  }
  void build(Module& module, const std::vector<std::shared_ptr<Module>>& units);
  void register_hooks(const std::shared_ptr<State>& self, const std::vector<std::shared_ptr<Module>>& units);
};

// Each parameter to its unit (by tensor identity; tied parameters count once) and its optimizer
// group; one flat per (unit, group) with parameters, the parameters re-pointed into it in place.
void FullyShardedDataParallel::State::build(Module& module, const std::vector<std::shared_ptr<Module>>& units) {
  const std::vector<Tensor> all = module.parameters();
  std::map<const TensorImpl*, size_t> unit_of;
  for (size_t u = 0; u < units.size(); ++u) {
    TESSERA_CHECK(units[u] != nullptr, "FullyShardedDataParallel", "unit ", u, " is null");
    for (const Tensor& p : units[u]->parameters()) {
      const auto [it, fresh] = unit_of.emplace(p.impl_ptr().get(), u + 1);
      TESSERA_CHECK(fresh || it->second == u + 1, "FullyShardedDataParallel", "a parameter of shape ", shape_str(p.shape()),
                    " belongs to units ", it->second - 1, " and ", u, " (units must not overlap)");
    }
  }
  std::map<const TensorImpl*, std::pair<size_t, size_t>> group_of;  // -> (group, position in it)
  if (options.param_groups.empty()) {
    group_options.push_back(OptimOptions{});
    for (size_t i = 0; i < all.size(); ++i) group_of.emplace(all[i].impl_ptr().get(), std::make_pair(size_t{0}, i));
  } else {
    for (size_t g = 0; g < options.param_groups.size(); ++g) {
      group_options.push_back(options.param_groups[g].options);
      const auto& ps = options.param_groups[g].params;
      for (size_t i = 0; i < ps.size(); ++i) {
        TESSERA_CHECK(group_of.emplace(ps[i].impl_ptr().get(), std::make_pair(g, i)).second, "FullyShardedDataParallel",
                      "a parameter of shape ", shape_str(ps[i].shape()), " is in two parameter groups");
      }
    }
  }
  std::map<const TensorImpl*, size_t> own_of;  // -> 1 + its index in own_flat
  for (size_t i = 0; i < options.own_flat.size(); ++i) {
    const Tensor& p = options.own_flat[i];
    TESSERA_CHECK(std::any_of(all.begin(), all.end(), [&](const Tensor& q) { return q.is_same(p); }) && !unit_of.count(p.impl_ptr().get()),
                  "FullyShardedDataParallel", "FsdpOptions::own_flat ", i, " (shape ", shape_str(p.shape()),
                  ") is not a parameter of the wrapped module outside the units");
    own_of.emplace(p.impl_ptr().get(), i + 1);
  }
  std::set<const TensorImpl*> seen;
  std::map<std::tuple<size_t, size_t, size_t>, size_t> flat_of;  // (unit, group, own) -> flat
  for (const Tensor& p : all) {
    if (!seen.insert(p.impl_ptr().get()).second) continue;
    const auto git = group_of.find(p.impl_ptr().get());
    TESSERA_CHECK(git != group_of.end(), "FullyShardedDataParallel", "a parameter of shape ", shape_str(p.shape()),
                  " is in none of FsdpOptions::param_groups");
    const auto uit = unit_of.find(p.impl_ptr().get());
    const size_t u = uit == unit_of.end() ? 0 : uit->second;
    const auto oit = own_of.find(p.impl_ptr().get());
    const size_t own = oit == own_of.end() ? 0 : oit->second;
    const auto [fit, fresh] = flat_of.emplace(std::make_tuple(u, git->second.first, own), flats.size());
    if (fresh) flats.emplace_back(), flats.back().unit = u, flats.back().group = git->second.first, flats.back().own = own;
    Flat& flat = flats[fit->second];
    flat.params.push_back(p);
    flat.index.push_back(git->second.second);
  }
  for (const auto& [impl, u] : unit_of) {
    TESSERA_CHECK(seen.count(impl), "FullyShardedDataParallel",
                  "a unit's parameters are not parameters of the wrapped module (pass sub-modules of it)");
  }
  TESSERA_CHECK(seen.size() == group_of.size(), "FullyShardedDataParallel",
                "FsdpOptions::param_groups holds parameters the wrapped module does not have");
  // Flats by unit, then group, then own flat: the order of parameters(), the same on every rank.
  std::stable_sort(flats.begin(), flats.end(),
                   [](const Flat& a, const Flat& b) { return std::tie(a.unit, a.group, a.own) < std::tie(b.unit, b.group, b.own); });
  of_unit.assign(units.size() + 1, {});
  of_group.assign(group_options.size(), {});
  NoGradGuard no_grad;
  const int64_t world = group.world_size();
  for (size_t f = 0; f < flats.size(); ++f) {
    Flat& flat = flats[f];
    of_unit[flat.unit].push_back(f);
    of_group[flat.group].push_back(f);
    const Tensor& first = flat.params.front();
    for (const Tensor& p : flat.params) {
      TESSERA_CHECK(p.dtype() == first.dtype() && p.device() == first.device(), "FullyShardedDataParallel", "unit ",
                    static_cast<int64_t>(flat.unit) - 1, " mixes ", p.dtype(), " on ", p.device().str(), " with ", first.dtype(), " on ",
                    first.device().str(), " in one parameter group (one dtype and device per unit and group)");
      TESSERA_CHECK(is_floating(p.dtype()), "FullyShardedDataParallel", "expected floating parameters, got ", p.dtype());
    }
    flat.offsets = detail::aligned_offsets(flat.params);
    flat.numel = flat.offsets.back();
    flat.offsets.pop_back();
    flat.got.assign(flat.params.size(), false);
    flat.shard = (flat.numel + world - 1) / world;
    flat.full = detail::flatten_at(flat.params, flat.offsets, false, flat.shard * world);
    flat.local = flat.full.narrow(0, flat.shard * group.rank(), flat.shard).clone().set_requires_grad();
    // In place, as Module::to(): the module (and anything holding these tensors) reads the views.
    for (size_t k = 0; k < flat.params.size(); ++k) {
      TensorImpl& impl = *flat.params[k].impl_ptr();
      impl.storage = flat.full.storage();
      impl.offset = flat.offsets[k];
      impl.strides = contiguous_strides(impl.shape);
      if (impl.autograd) impl.autograd->grad = Tensor();
    }
    release_flat(f);
  }
}

void FullyShardedDataParallel::State::register_hooks(const std::shared_ptr<State>& self,
                                                     const std::vector<std::shared_ptr<Module>>& units) {
  std::weak_ptr<State> weak = self;
  for (size_t f = 0; f < flats.size(); ++f) {
    for (size_t k = 0; k < flats[f].params.size(); ++k) {
      flats[f].params[k].register_post_accumulate_grad_hook([weak, f, k](const Tensor&) {
        if (auto st = weak.lock()) st->grad_ready(f, k);
      });
    }
  }
  for (size_t u = 1; u <= units.size(); ++u) {
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
      if (st->options.reshard_after_use) st->release(u);
    });
  }
}

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<Module> module, dist::ProcessGroup& group,
                                                   std::vector<std::shared_ptr<Module>> units, FsdpOptions options)
    : module_(std::move(module)), state_(std::make_shared<State>(group, std::move(options))) {
  TESSERA_CHECK(module_ != nullptr, "FullyShardedDataParallel", "no module");
  TESSERA_CHECK(!module_->parameters().empty(), "FullyShardedDataParallel", "the module has no parameters");
  if (state_->options.broadcast_parameters) {
    std::vector<Tensor> all = module_->parameters();
    for (const auto& [name, b] : module_->named_buffers()) all.push_back(b);
    detail::broadcast_tensors(group, all);
  }
  state_->build(*module_, units);
  state_->register_hooks(state_, units);
  state_->options.param_groups.clear();  // the module's own tensors: the shards replace them
}

FullyShardedDataParallel::~FullyShardedDataParallel() = default;

void FullyShardedDataParallel::begin_forward() { state_->begin_forward(); }

Tensor FullyShardedDataParallel::forward(const Tensor& x) {
  State& s = *state_;
  s.begin_forward();
  Tensor out = module_->forward(x);
  s.keep_order();
  return out;
}

std::vector<Tensor> FullyShardedDataParallel::parameters() const {
  std::vector<Tensor> out;
  for (const Flat& f : state_->flats) out.push_back(f.local);
  return out;
}

std::vector<ParamGroup> FullyShardedDataParallel::param_groups() const {
  std::vector<ParamGroup> out;
  for (size_t g = 0; g < state_->of_group.size(); ++g) {
    out.push_back(ParamGroup{{}, state_->group_options[g]});
    for (size_t f : state_->of_group[g]) out.back().params.push_back(state_->flats[f].local);
  }
  return out;
}

void FullyShardedDataParallel::finish_gradient_sync() {
  State& s = *state_;
  for (size_t f = 0; f < s.flats.size(); ++f) {
    if (std::any_of(s.flats[f].got.begin(), s.flats[f].got.end(), [](bool g) { return g; })) s.reduce(f);
  }
  s.finish_pending();
  for (size_t f = 0; f < s.flats.size(); ++f) s.release_flat(f);
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

Tensor FullyShardedDataParallel::shard_of(const Tensor& param) const {
  for (const Flat& f : state_->flats) {
    if (f.own != 0 && f.params.front().is_same(param)) return f.local;
  }
  throw Error(tessera::detail::concat("FullyShardedDataParallel: shard_of: the parameter of shape ", shape_str(param.shape()),
                                      " is not one of FsdpOptions::own_flat"));
}

double FullyShardedDataParallel::grad_square_sum(const std::function<bool(const Tensor&)>& counted) const {
  NoGradGuard no_grad;
  const State& s = *state_;
  double total = 0;
  for (const Flat& f : s.flats) {
    const Tensor g = f.local.grad();
    if (!g.defined()) continue;
    const int64_t begin = f.shard * s.group.rank(), end = begin + f.shard;  // this rank's slice of the flat
    for (size_t k = 0; k < f.params.size(); ++k) {
      const int64_t lo = std::max(begin, f.offsets[k]), hi = std::min(end, f.offsets[k] + f.params[k].numel());
      if (lo >= hi || !counted(f.params[k])) continue;
      const Tensor part = g.narrow(0, lo - begin, hi - lo).to(DType::f64);
      total += sum(mul(part, part)).item<double>();
    }
  }
  return total;
}

FullyShardedDataParallel::FullParams::FullParams(std::shared_ptr<State> state) : state_(std::move(state)) {
  for (size_t u = 0; u < state_->of_unit.size(); ++u) state_->gather(u);
  ++state_->pinned;
}

FullyShardedDataParallel::FullParams::~FullParams() {
  if (!state_ || --state_->pinned > 0) return;  // moved from, or another guard still holds them
  for (size_t f = 0; f < state_->flats.size(); ++f) state_->release_flat(f);
}

StateDict FullyShardedDataParallel::full_state_dict() {
  State& s = *state_;
  for (size_t u = 0; u < s.of_unit.size(); ++u) s.gather(u);
  StateDict out;
  for (const auto& [name, t] : module_->state_dict()) out[name] = t.detach().clone();
  for (size_t f = 0; f < s.flats.size(); ++f) s.release_flat(f);
  return out;
}

void FullyShardedDataParallel::load_full_state_dict(const StateDict& state) {
  State& s = *state_;
  NoGradGuard no_grad;
  for (size_t f = 0; f < s.flats.size(); ++f) {
    Flat& flat = s.flats[f];
    s.release_flat(f);  // waits for a gather in flight
    flat.full.storage()->materialize();
    detail::zero_gaps(flat.full, flat.params, flat.offsets);
  }
  try {
    module_->load_state_dict(state);  // validates every key and shape before writing
  } catch (...) {
    for (size_t f = 0; f < s.flats.size(); ++f) s.release_flat(f);
    throw;
  }
  for (size_t f = 0; f < s.flats.size(); ++f) {
    Flat& flat = s.flats[f];
    Tensor dst = flat.local.detach();
    dst.copy_(flat.full.narrow(0, flat.shard * s.group.rank(), flat.shard));
    s.release_flat(f);
  }
}

// The optimizer's groups must be param_groups(): the same shards, in order.
static void check_sharded_optimizer(const Optimizer& optimizer, const std::vector<ParamGroup>& want) {
  const auto& groups = optimizer.param_groups();
  bool same = groups.size() == want.size();
  for (size_t g = 0; same && g < groups.size(); ++g) {
    same = groups[g].params.size() == want[g].params.size();
    for (size_t i = 0; same && i < groups[g].params.size(); ++i) same = groups[g].params[i].is_same(want[g].params[i]);
  }
  TESSERA_CHECK(same, "FullyShardedDataParallel", "the optimizer must be built on param_groups() (", want.size(),
                " groups of flat shards); it has ", groups.size(), " groups of other tensors");
}

StateDict FullyShardedDataParallel::optimizer_state_dict(const Optimizer& optimizer) {
  State& s = *state_;
  check_sharded_optimizer(optimizer, param_groups());
  NoGradGuard no_grad;
  StateDict out;
  for (const auto& [key, t] : optimizer.state_dict()) {  // sorted: every rank gathers in the same order
    const auto k = detail::parse_optimizer_state_key(key);
    if (!k) {
      out[key] = t;
      continue;
    }
    const Flat& flat = s.flats[s.of_group.at(k->group).at(k->param)];
    Tensor all = empty({flat.shard * s.group.world_size()}, t.dtype(), t.device());
    s.group.all_gather(all, t.contiguous())->wait();
    for (size_t i = 0; i < flat.params.size(); ++i) {
      out[detail::optimizer_state_key(k->group, flat.index[i], k->name)] =
          all.narrow(0, flat.offsets[i], flat.params[i].numel()).reshape(flat.params[i].shape()).clone();
    }
  }
  return out;
}

void FullyShardedDataParallel::load_optimizer_state_dict(Optimizer& optimizer, const StateDict& state) {
  State& s = *state_;
  check_sharded_optimizer(optimizer, param_groups());
  std::map<std::pair<size_t, size_t>, std::pair<size_t, size_t>> where;  // (group, index in it) -> (shard in the group, position)
  for (size_t g = 0; g < s.of_group.size(); ++g) {
    for (size_t j = 0; j < s.of_group[g].size(); ++j) {
      const Flat& flat = s.flats[s.of_group[g][j]];
      for (size_t i = 0; i < flat.params.size(); ++i) where[{g, flat.index[i]}] = {j, i};
    }
  }
  NoGradGuard no_grad;
  StateDict mine;
  std::map<std::string, Tensor> whole;  // the sharded optimizer's key -> the flat's whole state
  for (const auto& [key, t] : state) {
    const auto k = detail::parse_optimizer_state_key(key);
    if (!k) {
      mine[key] = t;
      continue;
    }
    const auto it = where.find({k->group, k->param});
    TESSERA_CHECK(it != where.end(), "FullyShardedDataParallel load_optimizer_state_dict", "key '", key,
                  "' refers to a parameter the module does not have");
    const auto [j, i] = it->second;
    const Flat& flat = s.flats[s.of_group[k->group][j]];
    TESSERA_CHECK(t.shape() == flat.params[i].shape(), "FullyShardedDataParallel load_optimizer_state_dict", "state '", key, "' has shape ",
                  shape_str(t.shape()), ", expected ", shape_str(flat.params[i].shape()));
    Tensor& dst_all = whole[detail::optimizer_state_key(k->group, j, k->name)];
    const DType dt = flat.local.dtype() == DType::f16 || flat.local.dtype() == DType::bf16 ? DType::f32 : flat.local.dtype();
    if (!dst_all.defined()) dst_all = zeros({flat.shard * s.group.world_size()}, dt, flat.local.device());
    Tensor dst = dst_all.narrow(0, flat.offsets[i], t.numel());
    dst.copy_(t.reshape({-1}));
  }
  for (const auto& [key, t] : whole) {
    const auto k = detail::parse_optimizer_state_key(key);
    const Flat& flat = s.flats[s.of_group[k->group][k->param]];
    mine[key] = t.narrow(0, flat.shard * s.group.rank(), flat.shard).clone();
  }
  optimizer.load_state_dict(mine);
}

int FullyShardedDataParallel::rank() const { return state_->group.rank(); }
int FullyShardedDataParallel::world_size() const { return state_->group.world_size(); }
int64_t FullyShardedDataParallel::unit_count() const { return static_cast<int64_t>(state_->of_unit.size()); }
void FullyShardedDataParallel::barrier() { state_->group.barrier(); }
const FsdpStats& FullyShardedDataParallel::stats() const { return state_->stats; }
void FullyShardedDataParallel::reset_stats() { state_->stats = {}; }

double FullyShardedDataParallel::mean_over_ranks(double value) { return dist::mean_over_ranks(state_->group, value); }
bool FullyShardedDataParallel::any_rank(bool flag) { return dist::any_rank(state_->group, flag); }

std::vector<std::shared_ptr<Module>> default_fsdp_units(Module& model) {
  if (auto* gpt = dynamic_cast<GPT*>(&model)) return {gpt->blocks.begin(), gpt->blocks.end()};
  std::vector<std::shared_ptr<Module>> units;
  if (dynamic_cast<Sequential*>(&model)) {
    for (const auto& [name, child] : model.children()) {
      if (!child->parameters().empty()) units.push_back(child);
    }
  }
  return units;
}

}  // namespace tessera::nn
