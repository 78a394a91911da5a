// `tessera bench --suite allreduce` under mpirun: all-reduce (sum, f32, in place) of 1 KiB to
// 64 MiB over the default process group, reported as nccl-tests does: algorithm bandwidth =
// bytes / time, bus bandwidth = algbw x 2 (n - 1) / n (what each link carries in a ring
// all-reduce, comparable across rank counts). The time of an iteration is the slowest rank's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench.h"
#include "tessera/dist.h"
#include "tessera/error.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/pipeline.h"
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

}  // namespace

void run_allreduce(bool quick, const std::string& json_path, const Options& options) {
  if (dist::available_backends().empty()) throw Error("bench: the allreduce suite needs a process group (this build has no MPI)");
  dist::ProcessGroup& pg = *dist::init_process_group();
  if (pg.world_size() < 2) throw Error("bench: the allreduce suite needs at least 2 ranks: mpirun -n 2 tessera bench --suite allreduce");
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
  if (lead && !json_path.empty()) {
    write_json(records, json_path, options);
    std::printf("# wrote %zu records to %s\n", records.size(), json_path.c_str());
  }
}

void run_pipeline(bool quick, const std::string& json_path, const Options& options) {
  if (dist::available_backends().empty()) throw Error("bench: the pipeline suite needs a process group (this build has no MPI)");
  auto pg = dist::init_process_group();
  if (pg->world_size() < 2) throw Error("bench: the pipeline suite needs at least 2 ranks: mpirun -n 2 tessera bench --suite pipeline");
  const int stages = pg->world_size();
  const bool lead = pg->rank() == 0;
  const int64_t width = quick ? 128 : 512, batch = quick ? 64 : 256, micro = 8;
  if (lead) {
    std::printf(
        "# pipeline step (forward + backward), %d stages (one per rank, %s), each 4 x (Linear %lld + Tanh), batch %lld in %lld "
        "micro-batches\n",
        stages, pg->backend().c_str(), static_cast<long long>(width), static_cast<long long>(batch), static_cast<long long>(micro));
    std::printf("%-8s %12s %10s %12s\n", "schedule", "step ms", "bubble", "rank0 idle");
  }
  std::vector<Record> records;
  const auto mse = [](const Tensor& out, const Tensor& target) { return mse_loss(out, target); };
  for (auto schedule : {nn::PipelineSchedule::gpipe, nn::PipelineSchedule::one_f_one_b}) {
    manual_seed(1);
    std::vector<nn::ModulePtr> layers;
    for (int k = 0; k < 4; ++k)
      layers.push_back(std::make_shared<nn::Linear>(width, width)), layers.push_back(std::make_shared<nn::Tanh>());
    nn::Pipeline pipe(std::make_shared<nn::Sequential>(layers), pg, kCPU, schedule, micro);
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
      std::printf("%-8s %12.3f %10.3f %12.3f\n", nn::pipeline_schedule_name(schedule), median * 1e3, pipe.stats().bubble_fraction, idle);
    }
    Record r;
    r.suite = "pipeline", r.name = std::string(nn::pipeline_schedule_name(schedule)) + "_np" + std::to_string(stages), r.backend = "cpu";
    r.device = pg->backend() + " process group", r.dtype = "f32", r.shape = {batch, width, micro};
    r.median_s = median, r.min_s = times.front(), r.max_s = times.back();
    records.push_back(r);
  }
  if (lead && !json_path.empty()) {
    write_json(records, json_path, options);
    std::printf("# wrote %zu records to %s\n", records.size(), json_path.c_str());
  }
}

}  // namespace tessera::bench
