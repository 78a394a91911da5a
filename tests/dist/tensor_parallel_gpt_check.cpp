// dist_test tensor-parallel-gpt <device>: a GPT split Megatron-style across the ranks trains as
// the whole GPT does on one rank.
#include <cstdio>
#include <memory>

#include "dist_checks.h"
#include "tessera/nn/optim.h"
#include "tessera/nn/pipeline.h"
#include "tessera/nn/tensor_parallel.h"

using namespace tessera;

// The whole GPT on this rank and its tensor-parallel split over the group, both trained 50 Adam
// steps on the same tokens: the losses agree within 1e-4 (relative) at every step, the
// replicated parameters (positions, norms, the row-parallel biases) stay the same bits on every
// rank, and each rank's vocabulary slice of the tied embedding follows the whole one's.
void check_tensor_parallel_gpt(dist::ProcessGroup& pg, Device dev) {
  const int w = pg.world_size(), r = pg.rank();
  const nn::GPTConfig cfg{12, 8, 2, 6, 24, 0.0};  // heads and vocabulary divide by 2 and 3 ranks
  manual_seed(21);
  nn::GPT whole(cfg, nn::Placement{DType::f32, dev});
  std::shared_ptr<dist::ProcessGroup> group(&pg, [](dist::ProcessGroup*) {});
  nn::tp::ParallelGPT split(whole, group);
  nn::OptimOptions o;
  o.lr = 5e-3;
  nn::Adam whole_opt(whole.parameters(), o), split_opt(split.parameters(), o);
  const auto [x, y] = token_batch(cfg.vocab, 4, cfg.context, dev);
  double worst = 0.0, first = 0.0, last = 0.0;
  for (int step = 0; step < 50; ++step) {
    whole_opt.zero_grad(), split_opt.zero_grad();
    const Tensor logits = whole.forward(x);
    const Tensor want = cross_entropy(logits.reshape({-1, cfg.vocab}), y.reshape({-1}));
    want.backward();
    whole_opt.step();
    const Tensor got = split.loss(x, y);
    got.backward();
    split_opt.step();
    worst = std::max(worst, std::abs(got.item<double>() - want.item<double>()) / want.item<double>());
    if (step == 0) first = got.item<double>();
    last = got.item<double>();
  }
  std::printf("rank %d: tensor-parallel GPT (%d ranks) 50 steps: loss %.4f -> %.4f, worst relative difference %.2e\n", r, w, first, last,
              worst);
  expect(last < 0.5 * first, "the tensor-parallel GPT learns");
  expect(worst < 1e-4, "the tensor-parallel GPT's losses follow the whole GPT's within 1e-4");
  bool replicas = same_on_every_rank(pg, split.pos->weight) && same_on_every_rank(pg, split.ln_f->weight);
  for (const auto& b : split.blocks) {
    for (const Tensor& t : {b->ln1->weight, b->ln2->weight, b->proj->bias, b->fc_out->bias})
      replicas = same_on_every_rank(pg, t) && replicas;
  }
  expect(replicas, "the replicated parameters are the same bits on every rank");
  const int64_t local = cfg.vocab / w;
  expect(max_abs_diff(split.tok->weight, whole.tok->weight.narrow(0, r * local, local)) < 1e-2,
         "this rank's slice of the tied embedding follows the whole one's");
}

// Pipeline x tensor parallelism on 4 ranks: subgroups from split() (tensor-parallel pairs {0, 1}
// and {2, 3}, one per stage; pipeline pairs {0, 2} and {1, 3}), a GPT split into 2 stages whose
// layers are split across each pair, trained 50 steps as a 1F1B pipeline with the tied
// embedding and head (vocabulary slices) kept equal: the losses follow the whole GPT on one rank
// within 1e-4 at every step.
void check_pipeline_tensor_parallel_gpt(dist::ProcessGroup& pg, Device dev) {
  expect(pg.world_size() == 4, "pipeline x tensor parallel runs on 4 ranks (2 stages x 2)");
  if (pg.world_size() != 4) return;
  const int r = pg.rank(), stage = r / 2, tp_rank = r % 2;
  const std::shared_ptr<dist::ProcessGroup> tp = pg.split(stage, r), pp = pg.split(tp_rank, r);
  expect(tp->world_size() == 2 && tp->rank() == tp_rank && pp->world_size() == 2 && pp->rank() == stage, "the subgroups' ranks");
  Tensor ranks = full({1}, static_cast<double>(r), DType::f64, kCPU);
  tp->all_reduce(ranks, dist::ReduceOp::sum)->wait();
  expect(ranks.item<double>() == (stage == 0 ? 1.0 : 5.0), "an all-reduce stays inside its subgroup");

  const nn::GPTConfig cfg{12, 8, 2, 6, 24, 0.0};
  manual_seed(21);
  nn::GPT whole(cfg, nn::Placement{DType::f32, dev});
  nn::GPTStages split = nn::split_gpt(whole, 2, tp);
  nn::Pipeline pipe(split.stages[static_cast<size_t>(stage)], pp, dev, nn::PipelineSchedule::one_f_one_b, 4);
  pipe.tie(0, split.embedding, 1, split.head);
  nn::OptimOptions o;
  o.lr = 5e-3;
  nn::Adam whole_opt(whole.parameters(), o), stage_opt(pipe.parameters(), o);
  const auto split_ce = [&](const Tensor& logits, const Tensor& target) {
    return nn::tp::vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}), *tp);
  };
  const auto [x, y] = token_batch(cfg.vocab, 8, cfg.context, dev);
  double worst = 0.0, first = 0.0, last = 0.0;
  for (int step = 0; step < 50; ++step) {
    whole_opt.zero_grad(), stage_opt.zero_grad();
    const Tensor want = cross_entropy(whole.forward(x).reshape({-1, cfg.vocab}), y.reshape({-1}));
    want.backward();
    whole_opt.step();
    const double got = pipe.train_step(x, y, split_ce);
    stage_opt.step();
    worst = std::max(worst, std::abs(got - want.item<double>()) / want.item<double>());
    if (step == 0) first = got;
    last = got;
  }
  std::printf(
      "rank %d (stage %d, tensor-parallel rank %d): pipeline 2 x tensor parallel 2 GPT 50 steps: loss %.4f -> %.4f, worst relative "
      "difference %.2e\n",
      r, stage, tp_rank, first, last, worst);
  expect(last < 0.5 * first, "the pipeline x tensor parallel GPT learns");
  expect(worst < 1e-4, "the pipeline x tensor parallel GPT's losses follow the whole GPT's within 1e-4");
  bool replicas = true;  // the positions (stage 0) and the final norm (stage 1) are replicated across each pair
  for (const auto& [name, t] : split.stages[static_cast<size_t>(stage)]->named_parameters()) {
    if (name == "pos.weight" || name.rfind("ln_f.", 0) == 0) replicas = same_on_every_rank(*tp, t) && replicas;
  }
  expect(replicas, "replicated parameters stay the same bits across the tensor-parallel pair");
}
