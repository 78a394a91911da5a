#pragma once
// `tessera train --batch-size auto`: the per-rank batch found by nn::find_max_batch for the
// model being trained, using a throw-away copy of the model and optimizer so the real run
// starts from the same weights and random stream as with a fixed batch.
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "tessera/dist.h"
#include "tessera/nn/batch_search.h"
#include "tessera/nn/module.h"
#include "tessera/nn/optim.h"

namespace tessera::tools {

/** What one trial step needs: a fresh model and optimizer, and a loss on a random batch. */
struct BatchTrialModel {
  std::function<std::shared_ptr<nn::Module>()> make_model;
  std::function<std::unique_ptr<nn::Optimizer>(nn::Module&)> make_optimizer;
  /** The loss of a random input batch of `batch` samples (the forward pass, under autocast). */
  std::function<Tensor(nn::Module&, int64_t batch)> loss;
  /** Device tensors the data loader holds while a step runs (its queue of uploaded batches). */
  std::function<std::vector<Tensor>(int64_t batch)> in_flight;
};

/**
 * Searches the per-rank batch on `device` (at most `max`), prints the trial table unless
 * `quiet`, agrees on the smallest result across `group`'s ranks when given, and records the
 * trials in `report` ("batch_search"). Returns the per-rank batch.
 */
int64_t auto_batch_size(const BatchTrialModel& trial, Device device, int64_t max, dist::ProcessGroup* group, bool quiet,
                        nlohmann::json& report);

}  // namespace tessera::tools
