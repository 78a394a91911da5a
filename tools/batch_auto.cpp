#include "batch_auto.h"

#include <cstdio>

#include "tessera/runtime.h"

namespace tessera::tools {

int64_t auto_batch_size(const BatchTrialModel& trial, Device device, int64_t max, dist::ProcessGroup* group, bool quiet,
                        nlohmann::json& report) {
  nn::BatchSearchResult found;
  {
    std::shared_ptr<nn::Module> model = trial.make_model();
    std::unique_ptr<nn::Optimizer> optimizer = trial.make_optimizer(*model);
    model->train();
    nn::BatchSearchOptions o;
    o.device = device;
    o.max = max;
    o.start = std::min<int64_t>(32, max);
    found = nn::find_max_batch(
        [&](int64_t batch) {
          optimizer->zero_grad();
          const std::vector<Tensor> held = trial.in_flight(batch);
          trial.loss(*model, batch).backward();
          optimizer->step();
        },
        o);
  }  // the trial model and optimizer go before the real ones are made
  empty_cache(device);
  int64_t batch = found.batch;
  if (group) {
    Tensor t = full({1}, static_cast<double>(batch), DType::i64, device);
    group->all_reduce(t, dist::ReduceOp::min)->wait();
    batch = t.to(kCPU).item<int64_t>();
  }
  if (!quiet) {
    std::printf("--batch-size auto on %s%s: %lld per rank (the largest of %zu sizes tried that fits)\n%s", device.str().c_str(),
                found.memory_budget > 0 ? (" within " + std::to_string(found.memory_budget >> 20) + " MiB").c_str() : "",
                static_cast<long long>(batch), found.trials.size(), found.table().c_str());
    std::fflush(stdout);
  }
  nlohmann::json trials = nlohmann::json::array();
  for (const nn::BatchTrial& t : found.trials) {
    trials.push_back({{"batch", t.batch}, {"fits", t.fits}, {"samples_per_second", t.samples_per_second}, {"peak_bytes", t.peak_bytes}});
  }
  report = {{"batch", batch}, {"memory_budget_bytes", found.memory_budget}, {"trials", trials}};
  return batch;
}

}  // namespace tessera::tools
