// The pieces fully sharded training stands on, in one process: releasable storage, the
// post-accumulate gradient hook, module forward hooks, and nn::FullyShardedDataParallel over a
// one-rank group (every gather, free and reduce-scatter runs; the ranks' sharing is
// tests/dist/fsdp_checks.cpp under mpirun).
#include <map>

#include "support/checks.h"
#include "tessera/nn/fsdp.h"
#include "tessera/nn/language_model.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/optim.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;

namespace {

struct Done final : dist::Work {
  void wait() override {}
  bool test() override { return true; }
};

// World size 1: every collective is a copy (or nothing), done at once.
class SoloGroup final : public dist::ProcessGroup {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string backend() const override { return "solo"; }
  std::unique_ptr<dist::Work> all_reduce(Tensor, dist::ReduceOp) override { return std::make_unique<Done>(); }
  std::unique_ptr<dist::Work> broadcast(Tensor, int) override { return std::make_unique<Done>(); }
  std::unique_ptr<dist::Work> all_gather(Tensor out, const Tensor& in) override {
    ++gathers;
    out.copy_(in);
    return std::make_unique<Done>();
  }
  std::unique_ptr<dist::Work> reduce_scatter(Tensor out, const Tensor& in, dist::ReduceOp) override {
    out.copy_(in);
    return std::make_unique<Done>();
  }
  void barrier() override {}
  int gathers = 0;
};

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(sub(a.to(kCPU, DType::f64), b.to(kCPU, DType::f64)))).item<double>();
}
Tensor lm_loss(const Tensor& logits, const Tensor& target) {
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
}

}  // namespace

TEST_CASE("a released storage refuses reads and comes back on materialize") {
  Tensor t = full({4}, 2.0, DType::f32, device());
  const Tensor view = t.narrow(0, 1, 2);
  const int64_t before = memory_stats(device()).in_use_bytes;
  t.storage()->release();
  CHECK(t.storage()->released());
  CHECK(memory_stats(device()).in_use_bytes < before);
  CHECK_THROWS_WITH_AS((void)add(view, 1.0), doctest::Contains("was released"), Error);
  t.storage()->materialize();
  t.fill_(3.0);
  CHECK(view.to(kCPU).data<float>()[0] == 3.0f);
  float outside[4] = {};
  Storage wrapped(kCPU, outside, sizeof outside, nullptr);
  CHECK_THROWS_WITH_AS(wrapped.release(), doctest::Contains("only storage allocated by Tessera"), Error);
}

TEST_CASE("the post-accumulate hook sees the gradient already in .grad()") {
  Tensor w = ones({3}, DType::f32, device()).set_requires_grad();
  std::vector<double> seen;
  w.register_post_accumulate_grad_hook([&](const Tensor& p) { seen.push_back(p.grad().sum().item<double>()); });
  mul(w, 2.0).sum().backward();
  mul(w, 3.0).sum().backward();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == 6.0);
  CHECK(seen[1] == 15.0);  // accumulated: 2 + 3 per element
  const Tensor not_leaf = mul(w, 2.0);
  CHECK_THROWS_WITH_AS(not_leaf.register_post_accumulate_grad_hook([](const Tensor&) {}), doctest::Contains("leaf"), Error);
}

TEST_CASE("forward hooks run around calls through operator() and call()") {
  auto inner = std::make_shared<Linear>(2, 2);
  Sequential seq({inner, std::make_shared<Tanh>()});
  std::vector<std::string> log;
  inner->register_forward_pre_hook([&](Module& m) { log.push_back("pre " + m.name()); });
  inner->register_forward_hook([&](Module&, const Tensor& out) { log.push_back("post " + shape_str(out.shape())); });
  (void)seq(ones({3, 2}));
  CHECK(log == std::vector<std::string>{"pre Linear", "post [3, 2]"});
  (void)inner->call([&] { return inner->forward(ones({1, 2})); });
  CHECK(log.size() == 4);
}

TEST_CASE("a fully sharded unit's parameters start 256-byte aligned in its flat, as alone in an allocation") {
  // A vendor GEMM picks its algorithm (and so its rounding) by operand alignment: at an odd offset
  // in the flat, cuBLASLt summed a GPT's gradients in another order than for the plain model
  // (H200, 2026-11-28: weights 1e-9 apart after 5 steps). The embedding of 11 x 6 floats (264
  // bytes) puts the next parameter off a 256-byte boundary unless the flat leaves a gap.
  const GPTConfig cfg{11, 6, 2, 1, 8, 0.0};
  auto model = std::make_shared<GPT>(cfg, Placement{DType::f32, device()});
  SoloGroup group;
  FullyShardedDataParallel fsdp(model, group, {model->blocks.begin(), model->blocks.end()});
  const auto gathered = fsdp.summon_full_params();
  std::map<const void*, uintptr_t> base;  // each flat's storage -> its first parameter's address
  int64_t checked = 0;
  for (const Tensor& p : model->parameters()) {
    const auto address = reinterpret_cast<uintptr_t>(p.data_ptr());
    const auto [it, first] = base.emplace(p.impl_ptr()->storage.get(), address);
    if (!first) {
      CHECK_MESSAGE((address - it->second) % 256 == 0, shape_str(p.shape()));
      ++checked;
    }
  }
  CHECK(checked >= 6);
}

TEST_CASE("a GPT fully sharded over one rank trains exactly as the plain GPT") {
  const GPTConfig cfg{11, 6, 2, 2, 8, 0.0};
  manual_seed(4);
  auto plain = std::make_shared<GPT>(cfg, Placement{DType::f32, device()});
  manual_seed(4);
  auto sharded = std::make_shared<GPT>(cfg, Placement{DType::f32, device()});
  SoloGroup group;
  // Weight decay on matrices only (the language models' groups): each unit keeps a flat shard per group.
  OptimOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  FsdpOptions fo;
  fo.param_groups = sharded->param_groups(o);
  FullyShardedDataParallel fsdp(sharded, group, {sharded->blocks.begin(), sharded->blocks.end()}, fo);
  CHECK(fsdp.unit_count() == 3);
  CHECK(fsdp.parameters().size() == 6);  // (root, block 0, block 1) x (decayed, not decayed)
  int64_t sharded_numel = 0;
  for (const Tensor& t : fsdp.parameters()) sharded_numel += t.numel();
  // Each parameter starts 256 bytes after the flat's start or a multiple of that: the gaps (zeros)
  // are under 64 floats a parameter.
  const int64_t n_params = static_cast<int64_t>(plain->parameters().size());
  CHECK(sharded_numel >= plain->num_parameters());
  CHECK(sharded_numel < plain->num_parameters() + 64 * n_params);
  const std::vector<ParamGroup> groups = fsdp.param_groups();
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].options.weight_decay == 0.1);
  CHECK(groups[1].options.weight_decay == 0.0);
  AdamW plain_opt(plain->param_groups(o)), opt(groups);
  manual_seed(8);
  const Tensor tokens = randint(0, cfg.vocab, {3, cfg.context + 1}, DType::i64, device());
  const Tensor x = tokens.narrow(1, 0, cfg.context).contiguous(), y = tokens.narrow(1, 1, cfg.context).contiguous();
  for (int step = 0; step < 5; ++step) {
    plain_opt.zero_grad(), opt.zero_grad();
    const Tensor want = lm_loss(plain->forward(x), y);
    want.backward();
    plain_opt.step();
    const Tensor got = lm_loss(fsdp.forward(x), y);
    got.backward();
    fsdp.finish_gradient_sync();
    opt.step();
    CHECK(got.item<double>() == want.item<double>());
  }
  // Every gather is issued for a reason: the root once a step, each block before its forward and backward.
  CHECK(fsdp.stats().all_gathers == 5 * (1 + 2 * 2));
  CHECK(fsdp.stats().reduce_scatters == 5 * 6);
  const StateDict full = fsdp.full_state_dict();
  for (const auto& [name, t] : plain->state_dict()) CHECK_MESSAGE(max_abs_diff(t, full.at(name)) == 0.0, name);
  // The gathered optimizer state is the plain Adam's, key for key.
  const StateDict state = fsdp.optimizer_state_dict(opt), want_state = plain_opt.state_dict();
  CHECK(state.size() == want_state.size());
  for (const auto& [key, t] : want_state) CHECK_MESSAGE(max_abs_diff(t, state.at(key)) == 0.0, key);
  // Outside a step the weights are released: the bare model refuses to run.
  CHECK_THROWS_WITH_AS((void)sharded->forward(x), doctest::Contains("was released"), Error);
  // Evaluation without gradients gathers and frees too.
  {
    NoGradGuard no_grad;
    CHECK(max_abs_diff(fsdp.forward(x), plain->forward(x)) == 0.0);
  }
  fsdp.finish_gradient_sync();
  // Loading a whole state dict (here: the plain model's after one more step) reshards it.
  plain_opt.zero_grad();
  lm_loss(plain->forward(x), y).backward();
  plain_opt.step();
  fsdp.load_full_state_dict(plain->state_dict());
  NoGradGuard no_grad;
  CHECK(max_abs_diff(fsdp.forward(x), plain->forward(x)) == 0.0);
}

TEST_CASE("a fully sharded MLP accumulates gradients over two backward passes as the plain MLP does, resharded or kept gathered") {
  const auto make = [] {
    manual_seed(12);
    return std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<Linear>(6, 16, true, Placement{DType::f32, device()}),
                                                               std::make_shared<Tanh>(),
                                                               std::make_shared<Linear>(16, 3, true, Placement{DType::f32, device()})});
  };
  for (bool reshard : {true, false}) {
    CAPTURE(reshard);
    auto plain = make(), sharded = make();
    SoloGroup group;
    FsdpOptions fo;
    fo.reshard_after_use = reshard;  // false: each layer gathered once a step and reduced once, at the end
    FullyShardedDataParallel fsdp(sharded, group, default_fsdp_units(*sharded), fo);
    CHECK(fsdp.unit_count() == 3);  // the root (no parameters of its own) and the two Linear layers
    OptimOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    SGD plain_opt(plain->parameters(), o), opt(fsdp.parameters(), o);
    manual_seed(2);
    const Tensor x = randn({8, 6}, DType::f32, device()), y = randint(0, 3, {8}, DType::i64, device());
    for (int step = 0; step < 3; ++step) {
      plain_opt.zero_grad(), opt.zero_grad();
      for (int half = 0; half < 2; ++half) {  // two micro-batches, one optimizer step
        cross_entropy(plain->forward(x.narrow(0, 4 * half, 4)), y.narrow(0, 4 * half, 4)).backward();
        cross_entropy(fsdp.forward(x.narrow(0, 4 * half, 4)), y.narrow(0, 4 * half, 4)).backward();
      }
      fsdp.finish_gradient_sync();
      plain_opt.step(), opt.step();
      if (step == 0) {  // a step of two micro-batches: two forwards and two backwards through each layer
        CHECK(fsdp.stats().all_gathers == (reshard ? 8 : 2));
        CHECK(fsdp.stats().reduce_scatters == (reshard ? 4 : 2));
        if (!reshard) CHECK(fsdp.stats().peak_gathered_units == 2);  // both layers at once, through the step
      }
    }
    const StateDict full = fsdp.full_state_dict();
    for (const auto& [name, t] : plain->state_dict()) CHECK_MESSAGE(max_abs_diff(t, full.at(name)) < 1e-6, name);
    {
      const auto gathered = fsdp.summon_full_params();  // the bare model runs while the guard lives
      CHECK(max_abs_diff(sharded->forward(x), plain->forward(x)) < 1e-6);
    }
    // Every parameter is in a layer unit (the root holds none), so even a bare call gathers what it
    // reads through the layers' hooks.
    CHECK(max_abs_diff(sharded->forward(x), plain->forward(x)) < 1e-6);
  }
}

TEST_CASE("fully sharded units are checked") {
  const GPTConfig cfg{5, 4, 1, 1, 4, 0.0};
  auto gpt = std::make_shared<GPT>(cfg, Placement{DType::f32, device()});
  auto stranger = std::make_shared<Linear>(2, 2);
  SoloGroup group;
  CHECK_THROWS_WITH_AS(FullyShardedDataParallel(gpt, group, {stranger}), doctest::Contains("not parameters of the wrapped module"), Error);
  CHECK_THROWS_WITH_AS(FullyShardedDataParallel(gpt, group, {gpt->blocks[0], gpt->blocks[0]->qkv}), doctest::Contains("must not overlap"),
                       Error);
  FsdpOptions partial;
  partial.param_groups = {ParamGroup{{gpt->tok->weight}, OptimOptions{}}};
  CHECK_THROWS_WITH_AS(FullyShardedDataParallel(gpt, group, {}, partial), doctest::Contains("none of FsdpOptions::param_groups"), Error);
  Adam wrong(gpt->parameters(), OptimOptions{});
  FullyShardedDataParallel fsdp(gpt, group, {});
  CHECK_THROWS_WITH_AS((void)fsdp.optimizer_state_dict(wrong), doctest::Contains("built on param_groups()"), Error);
}

TEST_CASE("a process group without subgroups says so") {
  SoloGroup group;
  CHECK_THROWS_WITH_AS((void)group.split(0, 0), doctest::Contains("the solo process group has no subgroups"), NotImplemented);
}
