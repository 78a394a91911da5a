#pragma once
// What `tessera train` trains: a task says what a batch is, how the loss is made, what an epoch
// means and how the result is reported. The run itself (train.cpp) is the same for every task:
// one nn::Trainer holds every training policy.
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "batch_auto.h"
#include "tessera/dist.h"
#include "tessera/nn/data.h"
#include "tessera/nn/module.h"
#include "tessera/nn/serialize.h"
#include "tessera/nn/trainer.h"
#include "train_args.h"

namespace tessera::tools {

/** The run's process group and device, fixed before a task is built. */
struct RunContext {
  Device device = kCPU;
  dist::ProcessGroup* group = nullptr;
  int rank = 0, world = 1;
  /** Which shard of the data this rank reads, of how many: the rank and world under data
   *  parallelism; the model replica under model parallelism (a replica's ranks read alike). */
  int data_rank = 0, data_world = 1;
};

using BatchSources = std::pair<std::unique_ptr<nn::BatchSource>, std::unique_ptr<nn::BatchSource>>;

struct TrainTask {
  std::function<std::shared_ptr<nn::Module>()> make_model;  ///< fresh weights from the default generator
  /** The same model on the CPU (the same weights: random numbers do not depend on the device):
   *  a model split across devices is built here and each rank moves only its part. */
  std::function<std::shared_ptr<nn::Module>()> make_host_model;
  /** Stage `stage` of a pipeline of `stages` ranks, each holding `chunks` model chunks: the part
   *  of the host model that stage holds (a gpt's embeddings, norm and its own blocks, every weight
   *  the whole model's); empty for models that do not split. */
  std::function<std::shared_ptr<nn::Module>(int64_t stages, int64_t chunks, int64_t stage)> make_host_stage;
  BatchTrialModel trial;  ///< --batch-size auto: one trial step (make_model and make_optimizer are filled by the run)
  int64_t max_batch = 1;  ///< the largest per-rank batch the search may try
  /** The training and evaluation batches, once the per-rank batch is known. */
  std::function<BatchSources(int64_t rank_batch)> make_data;
  nn::LossFn loss;     ///< empty: cross entropy on class indices
  int64_t epochs = 1;  ///< Trainer epochs (language models: one per validation)
  /** Optimizer steps of an epoch of `train` (the learning-rate schedule's length is epochs x this,
   *  unless total_steps says otherwise). */
  std::function<int64_t(const nn::BatchSource& train)> steps_of_epoch;
  int64_t total_steps = 0;           ///< optimizer steps of the whole run, when known up front (language models)
  double min_lr_factor = 0;          ///< the cosine schedule's floor, as a share of --lr
  bool parameter_groups = false;     ///< no weight decay on biases, norms and embeddings (language models)
  const char* unit = "samples";      ///< what the throughput counts: images ("samples") or "tokens"
  int64_t targets_per_sample = 1;    ///< targets in one sample: 1 image, or --context tokens
  nn::Metadata checkpoint_metadata;  ///< what generate needs beside the weights
  nlohmann::json model_config;       ///< in the JSON report (language models)
  std::function<std::string(const nn::Module&, const TrainArgs&)> describe;  ///< the first line the run prints
  std::function<void(const nn::EpochStats&, const TrainArgs&)> print_epoch;
  std::function<void(const nn::EvalStats&, double seconds, double throughput, const TrainArgs&, int world)> print_result;
  /** The task's fields of the --json report. */
  std::function<void(nlohmann::json&, const nn::EvalStats&, double throughput, const TrainArgs&)> report;
  /** The task's fields of each epoch's entry in the report's history (optional). */
  std::function<void(nlohmann::json& entry, const nn::EpochStats&)> report_epoch;
  /** A progress bar per epoch on a terminal: image epochs; a language model's epochs are its
   *  validation intervals, each printed as a line. */
  bool progress_bar = true;
  /** --export: writes the model as ONNX, re-imports it and compares predictions. */
  std::function<void(nn::Module&, nn::BatchSource& test, const TrainArgs&)> export_check;
};

/** --model mlp|cnn: Fashion-MNIST classification. */
TrainTask make_image_task(const TrainArgs& a, const RunContext& run);
/** --model gpt|lstm: next-character prediction on a text (Debian's fortunes by default). */
TrainTask make_text_task(const TrainArgs& a, const RunContext& run);

}  // namespace tessera::tools
