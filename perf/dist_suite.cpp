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
#include "tessera/tessera.h"

namespace tessera::bench {

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
    std::vector<double> times;
    for (int rep = 0; rep < (quick ? 3 : 7); ++rep) {
      pg.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) pg.all_reduce(t)->wait();
      Tensor slowest = full({1}, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters, DType::f64, kCPU);
      pg.all_reduce(slowest, dist::ReduceOp::max)->wait();
      times.push_back(slowest.item<double>());
    }
    std::sort(times.begin(), times.end());
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

}  // namespace tessera::bench
