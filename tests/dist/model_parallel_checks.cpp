// GPTModelParallel across ranks beyond what tensor_parallel_gpt_check.cpp covers.
//
// dist_test pipeline-gpt-part <device> (2 ranks): each rank of a 2-stage pipeline builds only its
// stage's part of the GPT on the host; the host's allocator peak while the split is made, against
// building the whole GPT first.
//
// dist_test model-parallel-zero3 <device> (4 ranks): ZeRO-3 composed with pipeline and tensor
// parallelism. Each layout with two data-parallel replicas (pipeline 2 x data 2, tensor
// parallel 2 x data 2) trains once with the replicas' gradients all-reduced and once with each
// rank's part sharded over them (nn::GPTParallelOptions::zero3): the losses, the gathered
// checkpoint and the optimizer state agree; a checkpoint written by either loads into the other;
// and the sharded step's allocator peak is measured against the replicated one's.
#include <cstdio>
#include <memory>

#include "dist_checks.h"
#include "tessera/nn/model_parallel.h"
#include "tessera/nn/optim.h"

using namespace tessera;

namespace {

struct Trained {
  std::vector<double> losses;
  nn::StateDict model, optimizer;
  int64_t gathered_units = 0;               // the most units (the root among them) gathered at once
  double gathers = 0, reduce_scatters = 0;  // a step's, on average
  int64_t peak = 0, held = 0;  // the measured step's allocator peak above what was in use before; parameters held
};

// A GPT whose parameters and Adam state dominate its memory (the activations of a batch of 2
// short windows are small beside them), split `pipeline` x `tensor` over 4 ranks (2 replicas).
enum class Mode { replicated, sharded, sharded_kept };  // all-reduce; ZeRO-3; ZeRO-3 gathered once a step

Trained train(dist::ProcessGroup& pg, Device dev, int pipeline, int tensor, Mode mode, const nn::StateDict* start) {
  const nn::GPTConfig cfg{32, 8, 16, 4, 64, 0.0};         // 8 blocks a stage: 1 gathered (2 with a prefetch) of 8
  const int64_t before = memory_stats(dev).in_use_bytes;  // the earlier runs' checkpoints, on the CPU
  std::shared_ptr<dist::ProcessGroup> world(&pg, [](dist::ProcessGroup*) {});
  nn::OptimOptions o;
  o.lr = 3e-3, o.weight_decay = 0.1;
  nn::GPTParallelOptions po;
  po.pipeline = pipeline, po.tensor = tensor, po.micro_batches = 2, po.zero3 = mode != Mode::replicated, po.optimizer = o;
  po.zero3_reshard_after_use = mode != Mode::sharded_kept;
  std::unique_ptr<nn::GPTModelParallel> mp;
  {
    manual_seed(21);
    const nn::GPT whole(cfg, nn::Placement{DType::f32, kCPU});  // dropped once split: only the parts stay
    mp = std::make_unique<nn::GPTModelParallel>(whole, world, dev, po);
  }
  const auto opt = nn::make_optimizer("adamw", mp->param_groups());
  if (start) {  // the other mode's checkpoint: model and optimizer state
    mp->load_full_state_dict(start[0]);
    mp->load_optimizer_state_dict(*opt, start[1]);
  }
  Trained out;
  for (const Tensor& t : opt->param_groups().front().params) out.held += t.numel();
  for (const Tensor& t : opt->param_groups().back().params) out.held += t.numel();
  const auto [x, y] = token_batch(cfg.vocab, 2, cfg.context, dev, 3 + static_cast<uint64_t>(mp->layout().replica));
  for (int step = 0; step < 6; ++step) {
    if (step == 2) reset_peak_memory(dev);  // Adam's state exists from the first step on
    opt->zero_grad();
    out.losses.push_back(mp->train_batch(nn::Batch{x, y}, 1.0));
    mp->finish_gradient_sync();
    mp->clip_grad_norm_(0.5);  // clips: the norm sums every rank's part, each weight once
    opt->step();
    if (step == 2) out.peak = memory_stats(dev).peak_in_use_bytes - before;
  }
  if (const nn::FullyShardedDataParallel* f = mp->fully_sharded()) {
    out.gathered_units = f->stats().peak_gathered_units;
    out.gathers = static_cast<double>(f->stats().all_gathers) / 6,
    out.reduce_scatters = static_cast<double>(f->stats().reduce_scatters) / 6;
  }
  out.model = mp->full_state_dict();
  out.optimizer = mp->optimizer_state_dict(*opt);
  return out;
}

double worst_relative(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return worst;
}

double worst_state_difference(const nn::StateDict& a, const nn::StateDict& b) {
  double worst = 0.0;
  for (const auto& [name, t] : b) {
    const auto it = a.find(name);
    if (it == a.end() || it->second.shape() != t.shape()) return INFINITY;
    if (is_floating(t.dtype())) worst = std::max(worst, max_abs_diff(it->second, t));
  }
  return a.size() == b.size() ? worst : INFINITY;
}

}  // namespace

void check_model_parallel_zero3(dist::ProcessGroup& pg, Device dev) {
  expect(pg.world_size() == 4, "ZeRO-3 with model parallelism runs on 4 ranks (2 parts x 2 replicas)");
  if (pg.world_size() != 4) return;
  for (const auto& [pipeline, tensor] : {std::pair{2, 1}, std::pair{1, 2}}) {
    const Trained plain = train(pg, dev, pipeline, tensor, Mode::replicated, nullptr);
    const Trained sharded = train(pg, dev, pipeline, tensor, Mode::sharded, nullptr);
    const Trained kept = train(pg, dev, pipeline, tensor, Mode::sharded_kept, nullptr);
    const double loss_diff = worst_relative(sharded.losses, plain.losses);
    const double model_diff = worst_state_difference(sharded.model, plain.model);
    const double optim_diff = worst_state_difference(sharded.optimizer, plain.optimizer);
    // Each mode resumes from the other's checkpoint: the same next steps.
    const nn::StateDict from_plain[2] = {plain.model, plain.optimizer}, from_sharded[2] = {sharded.model, sharded.optimizer};
    const Trained sharded_resumed = train(pg, dev, pipeline, tensor, Mode::sharded, from_plain);
    const Trained plain_resumed = train(pg, dev, pipeline, tensor, Mode::replicated, from_sharded);
    const double resume_diff = worst_relative(sharded_resumed.losses, plain_resumed.losses);
    const double ratio = static_cast<double>(sharded.peak) / static_cast<double>(plain.peak);
    std::printf(
        "rank %d: pipeline %d x tensor parallel %d x data 2, ZeRO-3 vs all-reduce: losses %.2e, checkpoint %.2e, optimizer state %.2e, "
        "resumed across modes %.2e; holds %lld of %lld parameters, at most %lld units gathered; step peak %.3f vs %.3f MiB (%.2fx)\n",
        pg.rank(), pipeline, tensor, loss_diff, model_diff, optim_diff, resume_diff, static_cast<long long>(sharded.held),
        static_cast<long long>(plain.held), static_cast<long long>(sharded.gathered_units), sharded.peak / 1048576.0,
        plain.peak / 1048576.0, ratio);
    expect(plain.losses.back() < plain.losses.front(), "the model-parallel GPT learns");
    expect(loss_diff < 1e-5, "ZeRO-3's losses follow the all-reduced replicas' within 1e-5");
    expect(model_diff < 1e-5 && optim_diff < 1e-5, "ZeRO-3's gathered checkpoint and optimizer state are the replicated run's");
    expect(resume_diff < 1e-5, "a checkpoint of either mode resumes in the other");
    // Half, besides the flats' padding (each parameter starts 256-byte aligned, each flat divides by 2).
    expect(static_cast<double>(sharded.held) < 0.51 * static_cast<double>(plain.held),
           "each rank holds half its part's parameters (and their optimizer state)");
    expect(ratio < 0.6, "ZeRO-3's step peak at 2 replicas stays under 0.6x the replicated run's");
    // Kept gathered through the step: the same numbers for fewer collectives (2 micro-batches a
    // step under the pipeline: each block gathered for 2 forwards and 2 backwards, or once).
    const double kept_diff = worst_relative(kept.losses, plain.losses);
    std::printf(
        "rank %d: kept gathered: losses %.2e; a step's all-gathers %.1f vs %.1f, reduce-scatters %.1f vs %.1f; step peak %.3f MiB "
        "(%.2fx the replicated run's)\n",
        pg.rank(), kept_diff, kept.gathers, sharded.gathers, kept.reduce_scatters, sharded.reduce_scatters, kept.peak / 1048576.0,
        static_cast<double>(kept.peak) / static_cast<double>(plain.peak));
    expect(kept_diff < 1e-5, "ZeRO-3 kept gathered follows the replicated run");
    expect(kept.gathers < sharded.gathers && kept.reduce_scatters <= sharded.reduce_scatters,
           "keeping blocks gathered through the step issues fewer collectives");
    if (pipeline > 1) expect(kept.reduce_scatters < sharded.reduce_scatters, "one reduce-scatter per block a step, not per micro-batch");
  }
}

void check_pipeline_gpt_part(dist::ProcessGroup& pg, Device dev) {
  expect(pg.world_size() == 2, "a 2-stage pipeline runs on 2 ranks");
  if (pg.world_size() != 2) return;
  const nn::GPTConfig cfg{64, 16, 8, 4, 64, 0.0};
  std::shared_ptr<dist::ProcessGroup> world(&pg, [](dist::ProcessGroup*) {});
  nn::GPTParallelOptions po;
  po.pipeline = 2;
  // The host's peak above what was in use while the GPT (whole or part) is built and split: on
  // the CPU device the stage's copy lands in the same memory.
  const auto split_peak = [&](bool part, nn::StateDict& gathered) {
    synchronize(dev);
    const int64_t before = memory_stats(kCPU).in_use_bytes;
    reset_peak_memory(kCPU);
    manual_seed(11);
    std::unique_ptr<nn::GPTModelParallel> mp;
    {
      const nn::GPT gpt = part ? nn::GPT(cfg, nn::Placement{DType::f32, kCPU}, nn::gpt_stage_blocks(cfg.layers, 2, pg.rank()))
                               : nn::GPT(cfg, nn::Placement{DType::f32, kCPU});
      mp = std::make_unique<nn::GPTModelParallel>(gpt, world, dev, po);
    }
    const int64_t peak = memory_stats(kCPU).peak_in_use_bytes - before;
    gathered = mp->full_state_dict();
    return peak;
  };
  nn::StateDict from_whole, from_part;
  const int64_t whole_peak = split_peak(false, from_whole), part_peak = split_peak(true, from_part);
  int64_t whole_bytes = 0;
  for (const auto& [name, t] : from_whole) whole_bytes += t.numel() * 4;
  double diff = 0.0;
  for (const auto& [name, t] : from_whole) diff = std::max(diff, max_abs_diff(t, from_part.at(name)));
  std::printf(
      "rank %d: a %lld-byte GPT split into 2 stages on %s: host peak %.3f MiB built whole, %.3f MiB built in part (%.2fx); "
      "gathered weights differ by %g\n",
      pg.rank(), static_cast<long long>(whole_bytes), dev.str().c_str(), whole_peak / 1048576.0, part_peak / 1048576.0,
      static_cast<double>(part_peak) / static_cast<double>(whole_peak), diff);
  expect(diff == 0.0, "the stages built from parts gather into the whole GPT, bit for bit");
  expect(static_cast<double>(part_peak) < 0.8 * static_cast<double>(whole_peak), "building only the stage's part lowers the host's peak");
}
