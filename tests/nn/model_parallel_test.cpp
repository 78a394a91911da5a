// nn::RankLayout (which rank holds which stage, shard and replica) and nn::GPTModelParallel
// driven by the Trainer: a two-stage GPT pipeline in one process (emulated:0 and emulated:1 on
// the emulated device) trains as the whole GPT does, with gradient accumulation across
// pipeline steps and clipping by the whole model's norm. Across ranks: tests/dist.
#include <cmath>

#include "support/checks.h"
#include "tessera/nn/model_parallel.h"
#include "tessera/nn/optim.h"
#include "tessera/nn/text_data.h"
#include "tessera/nn/trainer.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;

TEST_CASE("rank layout: tensor parallel fastest, then data parallel, then the pipeline stage") {
  const RankLayout l = RankLayout::of(8, 5, 2, 2);
  CHECK(l.data == 2);
  CHECK(l.stage == 1);
  CHECK(l.replica == 0);
  CHECK(l.tensor_rank == 1);
  for (int r = 0; r < 8; ++r) {
    const RankLayout k = RankLayout::of(8, r, 2, 2);
    CHECK(k.rank_of(k.stage, k.replica, k.tensor_rank) == r);
  }
  const std::string text = l.describe();
  CHECK(text.find("layout: 8 ranks = pipeline 2 x tensor parallel 2 x data parallel 2") != std::string::npos);
  CHECK(text.find("stage 1, replica 1: ranks 6, 7") != std::string::npos);
  TESSERA_CHECK_THROWS_WITH(RankLayout::of(3, 0, 2, 2), "3 ranks do not lay out as pipeline 2 x tensor parallel 2");
  TESSERA_CHECK_THROWS_WITH(RankLayout::of(4, 0, 0, 2), "must be >= 1");
}

TEST_CASE("the Trainer trains a two-stage GPT pipeline in one process as it trains the whole GPT") {
  const GPTConfig cfg{12, 8, 2, 2, 16, 0.0};
  manual_seed(21);
  GPT whole(cfg, {DType::f32, device()});
  GPTParallelOptions po;
  po.pipeline = 2, po.micro_batches = 4;
  GPTModelParallel mp(whole, nullptr, device(), po);  // copies of the weights, before the whole GPT trains
  TESSERA_CHECK_THROWS_WITH(GPTModelParallel(whole, nullptr, device(), GPTParallelOptions{}), "plain data parallelism");
  TESSERA_CHECK_THROWS_WITH(GPTModelParallel(whole, nullptr, device(), GPTParallelOptions{.tensor = 2}), "needs ranks");

  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 400; ++i) tokens.push_back((i * 7 + i / 13) % cfg.vocab);
  WindowOptions wo;
  wo.batch = 8, wo.context = 8, wo.batches_per_epoch = 12, wo.seed = 5, wo.device = device();
  WindowSource whole_data(tokens, wo), split_data(tokens, wo);
  OptimOptions o;
  o.lr = 1e-2, o.weight_decay = 0.1;
  const auto whole_opt = make_optimizer("adamw", weight_decay_groups(whole, o));
  const auto split_opt = make_optimizer("adamw", weight_decay_groups(mp.local_module(), o));
  TrainOptions t;
  t.grad_accumulation = 2;  // two pipeline steps per optimizer step: the tied gradients summed once
  t.clip_norm = 0.05;       // below the gradients' norm: every step clips
  std::vector<double> want, got;
  t.on_step_end = [&](int64_t, double loss) { want.push_back(loss); };
  Trainer(whole, *whole_opt, nullptr, next_token_loss).fit(whole_data, nullptr, t);
  TrainOptions split_options = t;
  split_options.model_parallel = &mp;
  split_options.on_step_end = [&](int64_t, double loss) { got.push_back(loss); };
  Trainer split(mp.local_module(), *split_opt, nullptr, next_token_loss);
  split_options.checkpoint = "unused.safetensors";
  TESSERA_CHECK_THROWS_WITH(split.fit(split_data, nullptr, split_options), "checkpoints of model-parallel");
  split_options.checkpoint.clear();
  split.fit(split_data, nullptr, split_options);
  REQUIRE(want.size() == 6);
  REQUIRE(got.size() == want.size());
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / want[i]);
  MESSAGE("6 optimizer steps (12 pipeline steps): loss " << want.front() << " -> " << want.back() << ", worst relative difference "
                                                         << worst);
  CHECK(worst < 1e-4);
  CHECK(want.back() < want.front());
  const auto param = [&](size_t stage, const std::string& name) {
    for (const auto& [k, v] : mp.pipeline()->stages()[stage]->named_parameters()) {
      if (k == name) return v;
    }
    return Tensor();
  };
  const auto largest_gap = [](const Tensor& a, const Tensor& b) { return amax(abs(sub(a.to(kCPU), b.to(kCPU)))).item<double>(); };
  CHECK(largest_gap(param(0, "tok.weight"), param(1, "head")) == 0.0);  // the tied copies stayed equal
  CHECK(largest_gap(param(0, "tok.weight"), whole.tok->weight) < 1e-4);

  wo.seed = 9, wo.batches_per_epoch = 3, wo.same_every_epoch = true;
  WindowSource val_whole(tokens, wo), val_split(tokens, wo);
  const EvalStats a = Trainer(whole, *whole_opt, nullptr, next_token_loss).evaluate(val_whole);
  const EvalStats b = split.evaluate(val_split);
  CHECK(std::abs(a.loss - b.loss) < 1e-4 * a.loss);
  CHECK(a.samples == b.samples);
  CHECK(std::isnan(b.accuracy));  // split logits: the loss only
}
