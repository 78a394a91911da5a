// The suites run under mpirun. allreduce: all-reduce (sum, f32, in place) of 1 KiB to 64 MiB
// over the default process group, reported as nccl-tests does: algorithm bandwidth = bytes /
// time, bus bandwidth = algbw x 2 (n - 1) / n (what each link carries in a ring all-reduce,
// comparable across rank counts). pipeline: GPipe vs 1F1B step time and bubble, one stage per
// rank. dist: both, and a GPT's training step fully sharded (ZeRO-3) beside DDP: time and each
// rank's allocator peak. The time of an iteration is the slowest rank's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench.h"
#include "tessera/dist.h"
#include "tessera/error.h"
#include "tessera/nn/ddp.h"
#include "tessera/nn/fsdp.h"
#include "tessera/nn/language_model.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/optim.h"
#include "tessera/nn/pipeline.h"
#include "tessera/nn/trainer.h"
#include "tessera/tessera.h"

namespace tessera::bench {
namespace {

// Runs `body` `reps` times, every rank starting together after a barrier, and returns the
// slowest rank's seconds for each run divided by `per` (the iterations inside body), sorted.
template <class F>
std::vector<double> slowest_rank_times(dist::ProcessGroup& pg, int reps, int per, F&& body) {
  std::vector<double> times;
  for (int rep = 0; rep < reps; ++rep) {
    pg.barrier();
    const auto start = std::chrono::steady_clock::now();
    body();
    Tensor slowest = full({1}, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / per, DType::f64, kCPU);
    pg.all_reduce(slowest, dist::ReduceOp::max)->wait();
    times.push_back(slowest.item<double>());
  }
  std::sort(times.begin(), times.end());
  return times;
}

std::shared_ptr<dist::ProcessGroup> suite_group(const char* suite) {
  if (dist::available_backends().empty())
    throw Error(detail::concat("bench: the ", suite, " suite needs a process group (this build has no MPI)"));
  auto pg = dist::init_process_group();
  if (pg->world_size() < 2) {
    throw Error(detail::concat("bench: the ", suite, " suite needs at least 2 ranks: mpirun -n 2 tessera bench --suite ", suite));
  }
  return pg;
}

void write_records(dist::ProcessGroup& pg, const std::vector<Record>& records, const std::string& json_path, const Options& options) {
  if (pg.rank() != 0 || json_path.empty()) return;
  write_json(records, json_path, options);
  std::printf("# wrote %zu records to %s\n", records.size(), json_path.c_str());
}

std::vector<Record> allreduce_records(dist::ProcessGroup& pg, bool quick) {
  const int world = pg.world_size();
  const bool lead = pg.rank() == 0;
  if (lead) {
    std::printf("# all-reduce (sum, f32, in place) over %s, %d ranks; busbw = algbw x 2(n-1)/n (nccl-tests)\n", pg.backend().c_str(), world);
    std::printf("%-12s %12s %12s %12s\n", "bytes", "time us", "algbw GB/s", "busbw GB/s");
  }
  std::vector<Record> records;
  const int64_t largest = quick ? (int64_t{1} << 20) : (int64_t{64} << 20);
  for (int64_t bytes = 1024; bytes <= largest; bytes *= 4) {
    Tensor t = ones({bytes / 4}, DType::f32, kCPU);
    const int iters = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 5, quick ? 20 : 200));
    for (int w = 0; w < 3; ++w) pg.all_reduce(t)->wait();
    const std::vector<double> times = slowest_rank_times(pg, quick ? 3 : 7, iters, [&] {
      for (int i = 0; i < iters; ++i) pg.all_reduce(t)->wait();
    });
    const double median = times[times.size() / 2];
    const double algbw = static_cast<double>(bytes) / median / 1e9, busbw = algbw * 2.0 * (world - 1) / world;
    if (lead) std::printf("%-12lld %12.1f %12.3f %12.3f\n", static_cast<long long>(bytes), median * 1e6, algbw, busbw);
    Record r;
    r.suite = "allreduce", r.name = "all_reduce_sum_np" + std::to_string(world), r.backend = "cpu", r.device = pg.backend() + " process group";
    r.dtype = "f32", r.shape = {bytes / 4};
    r.median_s = median, r.min_s = times.front(), r.max_s = times.back(), r.gbps = busbw;
    records.push_back(r);
  }
  return records;
}

std::vector<Record> pipeline_records(const std::shared_ptr<dist::ProcessGroup>& pg, bool quick) {
  const int stages = pg->world_size();
  const bool lead = pg->rank() == 0;
  const int64_t width = quick ? 128 : 512, batch = quick ? 64 : 256, micro = 8;
  if (lead) {
    std::printf(
        "# pipeline step (forward + backward), %d stages (one per rank, %s), each 4 x (Linear %lld + Tanh) (interleaved: 2 "
        "chunks of 2), batch %lld in %lld micro-batches\n",
        stages, pg->backend().c_str(), static_cast<long long>(width), static_cast<long long>(batch), static_cast<long long>(micro));
    std::printf("%-11s %12s %10s %12s\n", "schedule", "step ms", "bubble", "rank0 idle");
  }
  std::vector<Record> records;
  const auto mse = [](const Tensor& out, const Tensor& target) { return mse_loss(out, target); };
  for (auto schedule : {nn::PipelineSchedule::gpipe, nn::PipelineSchedule::one_f_one_b, nn::PipelineSchedule::interleaved_1f1b}) {
    manual_seed(1);
    // The same 4 layers a rank: one stage, or interleaved two chunks of 2 (virtual stages r, r + S).
    const int chunks = schedule == nn::PipelineSchedule::interleaved_1f1b ? 2 : 1;
    std::vector<nn::ModulePtr> chunk_modules;
    for (int c = 0; c < chunks; ++c) {
      std::vector<nn::ModulePtr> layers;
      for (int k = 0; k < 4 / chunks; ++k)
        layers.push_back(std::make_shared<nn::Linear>(width, width)), layers.push_back(std::make_shared<nn::Tanh>());
      chunk_modules.push_back(std::make_shared<nn::Sequential>(layers));
    }
    nn::Pipeline pipe(chunk_modules, pg, kCPU, schedule, micro);
    const Tensor x = randn({batch, width}), y = randn({batch, width});
    for (int w = 0; w < 2; ++w) (void)pipe.train_step(x, y, mse);
    double idle = 0.0;
    const std::vector<double> times = slowest_rank_times(*pg, quick ? 3 : 9, 1, [&] {
      (void)pipe.train_step(x, y, mse);
      idle += pipe.stats().measured_idle_fraction;
    });
    const double median = times[times.size() / 2];
    idle /= static_cast<double>(times.size());
    if (lead) {
      std::printf("%-11s %12.3f %10.3f %12.3f\n", nn::pipeline_schedule_name(schedule), median * 1e3, pipe.stats().bubble_fraction, idle);
    }
    Record r;
    r.suite = "pipeline", r.name = std::string(nn::pipeline_schedule_name(schedule)) + "_np" + std::to_string(stages), r.backend = "cpu";
    r.device = pg->backend() + " process group", r.dtype = "f32", r.shape = {batch, width, micro};
    r.median_s = median, r.min_s = times.front(), r.max_s = times.back();
    records.push_back(r);
  }
  return records;
}

// One GPT training step (forward, backward, gradient sync, AdamW) under ZeRO-3 and under DDP on
// the same ranks and data: the slowest rank's time and the highest rank's allocator peak.
std::vector<Record> sharding_records(dist::ProcessGroup& pg, bool quick) {
  const nn::GPTConfig cfg = quick ? nn::GPTConfig{64, 32, 4, 4, 128, 0.0} : nn::GPTConfig{256, 64, 8, 8, 256, 0.0};
  const int64_t batch = 4;
  const bool lead = pg.rank() == 0;
  struct Result {
    double median = 0, min = 0, max = 0;
    int64_t peak = 0;
  };
  const auto measure = [&](bool sharded) {
    manual_seed(7);
    auto gpt = std::make_shared<nn::GPT>(cfg);
    const Tensor tokens = randint(0, cfg.vocab, {batch, cfg.context + 1}, DType::i64, kCPU);
    const Tensor x = tokens.narrow(1, 0, cfg.context).contiguous(), y = tokens.narrow(1, 1, cfg.context).contiguous();
    nn::OptimOptions o;
    o.lr = 1e-4;
    std::unique_ptr<nn::FullyShardedDataParallel> fsdp;
    std::unique_ptr<nn::DistributedDataParallel> ddp;
    nn::FsdpOptions fo;
    fo.param_groups = gpt->param_groups(o);
    if (sharded) fsdp = std::make_unique<nn::FullyShardedDataParallel>(gpt, pg, nn::default_fsdp_units(*gpt), fo);
    else ddp = std::make_unique<nn::DistributedDataParallel>(gpt, pg);
    nn::AdamW opt(sharded ? fsdp->param_groups() : gpt->param_groups(o));
    const auto step = [&] {
      opt.zero_grad();
      nn::next_token_loss(sharded ? fsdp->forward(x) : ddp->forward(x), y).backward();
      if (sharded) fsdp->finish_gradient_sync();
      else ddp->finish_gradient_sync();
      opt.step();
    };
    for (int w = 0; w < 2; ++w) step();
    reset_peak_memory(kCPU);
    const std::vector<double> times = slowest_rank_times(pg, quick ? 3 : 9, 1, step);
    Tensor peak = full({1}, static_cast<double>(memory_stats(kCPU).peak_in_use_bytes), DType::f64, kCPU);
    pg.all_reduce(peak, dist::ReduceOp::max)->wait();
    return Result{times[times.size() / 2], times.front(), times.back(), static_cast<int64_t>(peak.item<double>())};
  };
  const Result ddp = measure(false), zero = measure(true);
  if (lead) {
    std::printf("# GPT training step (%lld blocks of %lld, vocab %lld, %lld x %lld tokens per rank, AdamW), %d ranks over %s\n",
                static_cast<long long>(cfg.layers), static_cast<long long>(cfg.dim), static_cast<long long>(cfg.vocab),
                static_cast<long long>(batch), static_cast<long long>(cfg.context), pg.world_size(), pg.backend().c_str());
    std::printf("%-8s %12s %14s\n", "mode", "step ms", "peak MiB/rank");
    std::printf("%-8s %12.3f %14.2f\n", "DDP", ddp.median * 1e3, static_cast<double>(ddp.peak) / 1048576.0);
    std::printf("%-8s %12.3f %14.2f   (%.2fx DDP's memory, %.2fx its time)\n", "ZeRO-3", zero.median * 1e3,
                static_cast<double>(zero.peak) / 1048576.0, static_cast<double>(zero.peak) / static_cast<double>(ddp.peak),
                zero.median / ddp.median);
  }
  Record r;
  r.suite = "dist", r.name = "gpt_step_zero3_np" + std::to_string(pg.world_size()), r.backend = "cpu";
  r.device = pg.backend() + " process group", r.dtype = "f32", r.shape = {batch, cfg.context, cfg.layers, cfg.dim};
  r.median_s = zero.median, r.min_s = zero.min, r.max_s = zero.max, r.peak_bytes = zero.peak;
  r.peer = "DDP (same ranks, same run)", r.peer_median_s = ddp.median, r.ratio = ddp.median / zero.median, r.peer_peak_bytes = ddp.peak;
  return {r};
}

}  // namespace

void run_allreduce(bool quick, const std::string& json_path, const Options& options) {
  auto pg = suite_group("allreduce");
  write_records(*pg, allreduce_records(*pg, quick), json_path, options);
}

void run_pipeline(bool quick, const std::string& json_path, const Options& options) {
  auto pg = suite_group("pipeline");
  write_records(*pg, pipeline_records(pg, quick), json_path, options);
}

void run_dist(bool quick, const std::string& json_path, const Options& options) {
  auto pg = suite_group("dist");
  std::vector<Record> records = allreduce_records(*pg, quick);
  if (pg->rank() == 0) std::printf("\n");
  for (Record& r : pipeline_records(pg, quick)) records.push_back(std::move(r));
  if (pg->rank() == 0) std::printf("\n");
  for (Record& r : sharding_records(*pg, quick)) records.push_back(std::move(r));
  write_records(*pg, records, json_path, options);
}

}  // namespace tessera::bench
