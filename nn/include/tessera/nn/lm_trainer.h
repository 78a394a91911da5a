#pragma once
// Step-based training of a character language model: AdamW with decay / no-decay groups, linear
// warm-up then cosine decay, global-norm clipping, gradient accumulation, periodic validation
// loss (nats per character) and tokens/s, and checkpoints that `tessera generate` reads.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/nn/ddp.h"
#include "tessera/nn/language_model.h"
#include "tessera/nn/serialize.h"
#include "tessera/nn/text_data.h"

namespace tessera::nn {

struct LMTrainOptions {
  int64_t steps = 2000, batch = 32, context = 128, grad_accumulation = 1;
  int64_t warmup = 100;         ///< linear warm-up steps, then cosine to min_lr_factor
  int64_t eval_every = 250;     ///< validation every N steps (and at the end)
  int64_t eval_batches = 16;    ///< validation windows = eval_batches x batch, the same every time
  double lr = 1e-3, min_lr_factor = 0.1, weight_decay = 0.1, clip_norm = 1.0;
  uint64_t seed = 0;
  DType precision = DType::f32;  ///< bf16 / f16 run the forward pass under autocast
  std::string checkpoint;        ///< written after each validation (empty: none)
  Metadata metadata;             ///< stored in the checkpoint (model config, vocabulary)
  std::function<void(int64_t step, double loss)> on_step;
  /** Data parallel (tessera train --distributed): `batch` is this rank's share of the global
   *  batch; each rank draws its own windows (seed + rank), gradients are averaged by the DDP
   *  wrapper of `model`, losses and tokens/s are over all ranks, only rank 0 writes checkpoints. */
  DistributedDataParallel* ddp = nullptr;
};

struct LMLog {
  int64_t step = 0;
  double train_loss = 0;         ///< mean over the steps since the last log
  double val_loss = 0;           ///< nats per character
  double lr = 0;
  double tokens_per_second = 0;  ///< training tokens over training time since the last log
  double seconds = 0;            ///< since the start
};

/** Trains and returns one log per validation. `on_log` sees each as it happens. */
std::vector<LMLog> train_language_model(LanguageModel& model, const TextCorpus& corpus, const LMTrainOptions& options,
                                        const std::function<void(const LMLog&)>& on_log = {});

/** Mean cross entropy (nats/char) over `batches` windows of `data` drawn from a fixed seed. */
double evaluate_language_model(LanguageModel& model, const std::vector<int64_t>& data, int64_t batches, int64_t batch, int64_t context,
                               DType precision = DType::f32);

/** Saves the model's tensors ("model.*") and `metadata` to a safetensors file, atomically. */
void save_language_model(const LanguageModel& model, const std::string& path, const Metadata& metadata);

/**
 * Reads a checkpoint written by save_language_model (from `tessera train --model gpt|lstm`):
 * rebuilds the model from its "model_config" metadata on `device` and loads its weights;
 * `vocab` receives the vocabulary.
 */
std::shared_ptr<LanguageModel> load_language_model(const std::string& path, Device device, CharVocab& vocab);

}  // namespace tessera::nn
