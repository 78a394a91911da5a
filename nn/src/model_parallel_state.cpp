// Checkpoints of model-parallel runs: the stages' and tensor-parallel shards' parameters and
// optimizer state gathered under the unsplit GPT's names (the QKV rows put back in [q; k; v]
// order, the row-parallel weights' columns side by side), and a whole model's state scattered
// back to each rank's parts. The file is what an unsplit run writes, so it loads under any
// layout, world size or mode and into `tessera generate`.
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>

#include "sharding.h"
#include "tessera/autograd.h"
#include "tessera/nn/model_parallel.h"

namespace tessera::nn {

namespace detail {
bool is_tensor_parallel_slice(const std::string& name) {
  for (const char* slice : {"tok.weight", "head", "qkv.weight", "qkv.bias", "fc.weight", "fc.bias", "proj.weight", "fc_out.weight"}) {
    const std::string s(slice);
    if (name == s ||
        (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0 && name[name.size() - s.size() - 1] == '.'))
      return true;
  }
  return false;
}
}  // namespace detail

namespace {
constexpr const char* kOp = "model-parallel checkpoint";

bool ends_with(const std::string& s, const char* tail) {
  const std::string t(tail);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// The state kept per parameter by Tessera's optimizers (SGD/RMSprop momentum, Adam moments,
// RMSprop's average): gathering needs every rank to agree on the names without exchanging them.
constexpr const char* kStateNames[] = {"exp_avg", "exp_avg_sq", "momentum_buffer", "square_avg"};

DType state_dtype_of(DType param) { return param == DType::f16 || param == DType::bf16 ? DType::f32 : param; }

// The record of this rank's parameter `t`, the optimizer's group g, index k.
template <class Record>
const Record& record_of(const std::vector<Record>& records, const Tensor& t, size_t g, size_t k) {
  const auto it = std::find_if(records.begin(), records.end(), [&](const Record& p) { return p.tensor.is_same(t); });
  TESSERA_CHECK(it != records.end(), kOp, "the optimizer's group ", g, " parameter ", k,
                " is not one of this rank's model parameters: build it on local_module()'s parameters");
  return *it;
}
}  // namespace

std::string GPTModelParallel::whole_name_of(const std::string& local_name) const {
  std::string n = local_name;
  // In one process the local module is a Sequential of the stages, and with several chunks one
  // of this rank's chunks: "1.blocks.2.fc.weight".
  if (pipeline_ && (layout_.world == 1 || chunks_ > 1)) n = n.substr(n.find('.') + 1);
  if (n == "head") return "tok.weight";                                    // the tied copy
  if (n.rfind("blocks.", 0) == 0) return "block" + n.substr(7);            // a stage's blocks
  if (std::isdigit(static_cast<unsigned char>(n[0]))) return "block" + n;  // tp::ParallelGPT's blocks
  return n;
}

// The unsplit GPT's parameters in its order (tok, pos, the blocks, ln_f), also for a part built
// for one stage: a skipped block's names and shapes are those of a built one.
static std::vector<std::pair<std::string, Tensor>> whole_parameters(const GPT& whole) {
  std::vector<std::pair<std::string, Tensor>> out, block, tail;
  for (const auto& b : whole.blocks) {
    if (b) block = b->named_parameters();
  }
  for (auto& [name, t] : whole.named_parameters()) {
    if (name.rfind("block", 0) == 0) continue;
    (name.rfind("ln_f.", 0) == 0 ? tail : out).emplace_back(name, t);
  }
  for (size_t l = 0; l < whole.blocks.size(); ++l) {
    for (const auto& [name, t] : whole.blocks[l] ? whole.blocks[l]->named_parameters() : block)
      out.emplace_back("block" + std::to_string(l) + "." + name, t);
  }
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

void GPTModelParallel::index_parameters(const GPT& gpt) {
  const auto parameters = whole_parameters(gpt);
  // The unsplit GPT's optimizer groups (weight_decay_groups): matrices decay, the rest do not.
  size_t counts[2] = {0, 0};
  bool any_matrix = false;
  for (const auto& [name, t] : parameters) any_matrix = any_matrix || t.dim() >= 2;
  std::map<std::string, size_t> by_name;
  for (const auto& [name, t] : parameters) {
    const size_t group = t.dim() >= 2 || !any_matrix ? 0 : 1;
    by_name[name] = whole_.size();
    whole_.push_back(WholeParameter{name, t.shape(), t.dtype(), group, counts[group]++});
  }
  for (const auto& [name, t] : local_->named_parameters()) {
    const std::string w = whole_name_of(name);
    const auto it = by_name.find(w);
    TESSERA_CHECK(it != by_name.end(), kOp, "the split GPT's parameter '", name, "' has no counterpart '", w, "' in the whole GPT");
    local_params_.push_back(LocalParameter{t, it->second, ends_with(name, "head")});
  }
}

bool GPTModelParallel::owns(const LocalParameter& p) const {
  // Each element of the whole model is written by one rank: replica 0's, the first rank of a
  // tensor-parallel group for the replicated weights, and never the tied copy.
  return !p.tied_copy && layout_.replica == 0 && (layout_.tensor_rank == 0 || detail::is_tensor_parallel_slice(whole_[p.whole].name));
}

std::vector<std::pair<Tensor, Tensor>> GPTModelParallel::pieces(const std::string& name, const Tensor& whole, const Tensor& local) const {
  const int64_t w = tensor_group_ ? tensor_group_->world_size() : 1, r = tensor_group_ ? tensor_group_->rank() : 0;
  if (w == 1 || !detail::is_tensor_parallel_slice(name)) return {{whole, local}};
  if (ends_with(name, "qkv.weight") || ends_with(name, "qkv.bias")) {  // this rank's heads of q, of k and of v
    const int64_t c = whole.size(0) / 3, n = c / w;
    std::vector<std::pair<Tensor, Tensor>> out;
    for (int64_t i = 0; i < 3; ++i) out.emplace_back(whole.narrow(0, i * c + r * n, n), local.narrow(0, i * n, n));
    return out;
  }
  const int axis = ends_with(name, "proj.weight") || ends_with(name, "fc_out.weight") ? 1 : 0;  // row-parallel: input features
  const int64_t n = whole.size(axis) / w;
  return {{whole.narrow(axis, r * n, n), local}};
}

Tensor GPTModelParallel::gather_whole(size_t i, const Tensor& mine, DType dtype) {
  // On the CPU: a model larger than one device still gathers, one parameter at a time. Every
  // rank adds its parts into zeros, so a sum over the ranks assembles the whole (x + 0 is exact).
  Tensor buffer = zeros(whole_[i].shape, dtype, kCPU);
  if (mine.defined()) {
    for (auto& [whole_part, local_part] : pieces(whole_[i].name, buffer, mine)) whole_part.copy_(local_part);
  }
  if (world_ && world_->world_size() > 1) world_->all_reduce(buffer, dist::ReduceOp::sum)->wait();
  return buffer;
}

StateDict GPTModelParallel::full_state_dict() {
  const NoGradGuard no_grad;
  std::optional<FullyShardedDataParallel::FullParams> gathered;  // ZeRO-3: the local parameters whole meanwhile
  if (fsdp_) gathered.emplace(fsdp_->summon_full_params());
  std::vector<Tensor> mine(whole_.size());
  for (const LocalParameter& p : local_params_) {
    if (owns(p)) mine[p.whole] = p.tensor;
  }
  StateDict out;  // every rank walks whole_ in the same order: the collectives pair up
  for (size_t i = 0; i < whole_.size(); ++i) out[whole_[i].name] = gather_whole(i, mine[i], whole_[i].dtype);
  return out;
}

void GPTModelParallel::load_full_state_dict(const StateDict& state) {
  for (const WholeParameter& p : whole_) {
    const auto it = state.find(p.name);
    TESSERA_CHECK(it != state.end(), kOp, "the state holds no '", p.name, "' (", state.size(), " entries): not this GPT's");
    TESSERA_CHECK(it->second.shape() == p.shape, kOp, "'", p.name, "' has shape ", shape_str(it->second.shape()), ", this GPT's is ",
                  shape_str(p.shape));
  }
  std::set<std::string> known;
  for (const WholeParameter& p : whole_) known.insert(p.name);
  for (const auto& [name, t] : state) TESSERA_CHECK(known.count(name), kOp, "'", name, "' is not a parameter of this GPT");

  const NoGradGuard no_grad;
  std::optional<FullyShardedDataParallel::FullParams> gathered;  // ZeRO-3: written whole, then sharded back
  if (fsdp_) gathered.emplace(fsdp_->summon_full_params());
  for (const LocalParameter& p : local_params_) {
    for (auto& [whole_part, local_part] : pieces(whole_[p.whole].name, state.at(whole_[p.whole].name), p.tensor))
      local_part.copy_(whole_part);
  }
  if (!fsdp_) return;
  StateDict local;
  for (const auto& [name, t] : local_->state_dict()) local[name] = t.detach().clone();
  gathered.reset();
  fsdp_->load_full_state_dict(local);
}

StateDict GPTModelParallel::optimizer_state_dict(const Optimizer& optimizer) {
  // Under ZeRO-3 the optimizer steps shards: its state, gathered over the replicas, is that of an
  // optimizer on the local parameters' groups, per parameter (local_groups_).
  const StateDict local = fsdp_ ? fsdp_->optimizer_state_dict(optimizer) : optimizer.state_dict();
  // The local optimizer's (group, index) -> this rank's parameter record.
  std::map<std::pair<size_t, size_t>, const LocalParameter*> at;
  const auto& groups = fsdp_ ? local_groups_ : optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t k = 0; k < groups[g].params.size(); ++k) {
      at[{g, k}] = &record_of(local_params_, groups[g].params[k], g, k);
    }
  }
  const NoGradGuard no_grad;
  constexpr size_t kNames = std::size(kStateNames);
  std::vector<Tensor> mine(whole_.size() * kNames);
  Tensor present = zeros({static_cast<int64_t>(mine.size())}, DType::i32, kCPU);
  for (const auto& [key, t] : local) {
    const auto k = detail::parse_optimizer_state_key(key);
    if (!k) continue;
    const auto name = std::find(std::begin(kStateNames), std::end(kStateNames), k->name);
    TESSERA_CHECK(name != std::end(kStateNames), kOp, "optimizer state '", k->name, "' (", optimizer.name(),
                  ") is not one the gathering knows: exp_avg, exp_avg_sq, momentum_buffer, square_avg");
    const LocalParameter& p = *at.at({k->group, k->param});
    if (!owns(p)) continue;
    const size_t slot = p.whole * kNames + static_cast<size_t>(name - std::begin(kStateNames));
    mine[slot] = t;
    present.data<int32_t>()[slot] = 1;
  }
  if (world_ && world_->world_size() > 1) world_->all_reduce(present, dist::ReduceOp::max)->wait();
  StateDict out;
  for (size_t slot = 0; slot < mine.size(); ++slot) {
    if (present.data<int32_t>()[slot] == 0) continue;
    const WholeParameter& p = whole_[slot / kNames];
    out[detail::optimizer_state_key(p.group, p.index, kStateNames[slot % kNames])] =
        gather_whole(slot / kNames, mine[slot], state_dtype_of(p.dtype));
  }
  out["steps"] = local.at("steps");
  // Each whole group's learning rate: the local group holding its parameters (the same schedule
  // moves every rank's groups alike).
  for (const auto& [where, p] : at) {
    const std::string key = "group." + std::to_string(whole_[p->whole].group) + ".lr";
    if (!out.count(key)) out[key] = local.at("group." + std::to_string(where.first) + ".lr");
  }
  return out;
}

void GPTModelParallel::load_optimizer_state_dict(Optimizer& optimizer, const StateDict& state) {
  std::map<std::pair<size_t, size_t>, size_t> whole_at;  // the unsplit optimizer's (group, index) -> whole_
  for (size_t i = 0; i < whole_.size(); ++i) whole_at[{whole_[i].group, whole_[i].index}] = i;
  std::vector<std::vector<std::pair<size_t, size_t>>> holders(whole_.size());  // whole_ -> the local (group, index) holding it
  const auto& groups = fsdp_ ? local_groups_ : optimizer.param_groups();
  StateDict mine;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t k = 0; k < groups[g].params.size(); ++k) {
      const size_t whole = record_of(local_params_, groups[g].params[k], g, k).whole;
      holders[whole].emplace_back(g, k);
      if (k == 0) {
        if (const auto lr = state.find("group." + std::to_string(whole_[whole].group) + ".lr"); lr != state.end())
          mine["group." + std::to_string(g) + ".lr"] = lr->second;
      }
    }
  }
  for (const auto& [key, t] : state) {
    const auto k = detail::parse_optimizer_state_key(key);
    if (!k) {
      if (key == "steps") mine[key] = t;
      continue;
    }
    const auto w = whole_at.find({k->group, k->param});
    TESSERA_CHECK(w != whole_at.end(), kOp, "optimizer state '", key, "' refers to a parameter the GPT does not have");
    const WholeParameter& p = whole_[w->second];
    TESSERA_CHECK(t.shape() == p.shape, kOp, "optimizer state '", key, "' has shape ", shape_str(t.shape()), ", its parameter '", p.name,
                  "' ", shape_str(p.shape));
    for (const auto& [g, i] : holders[w->second]) {
      const Tensor& param = groups[g].params[i];
      Tensor part = zeros(param.shape(), state_dtype_of(param.dtype()), kCPU);
      for (auto& [whole_part, local_part] : pieces(p.name, t, part)) local_part.copy_(whole_part);
      mine[detail::optimizer_state_key(g, i, k->name)] = part;
    }
  }
  if (fsdp_) fsdp_->load_optimizer_state_dict(optimizer, mine);  // each replica keeps its slices
  else optimizer.load_state_dict(mine);                          // moves each state to its parameter's device
}

}  // namespace tessera::nn
