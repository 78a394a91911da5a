#pragma once
// One-file training checkpoints for any loop (the Trainer's and your own): the model's weights,
// the optimizer's state, the scheduler's step, the GradScaler's state, the default generator's
// seed and offset, the epoch and step counters and your own metadata, in one safetensors file
// (format tessera-checkpoint-1) written atomically. A loop saved at step N and resumed from the
// file continues bit for bit as the unbroken loop would.
#include <functional>
#include <string>

#include "tessera/nn/amp.h"
#include "tessera/nn/module.h"
#include "tessera/nn/optim.h"
#include "tessera/nn/serialize.h"

namespace tessera::nn {

/** What a checkpoint saves and restores; every part but the model may be null. */
struct CheckpointParts {
  Module* model = nullptr;
  Optimizer* optimizer = nullptr;
  Scheduler* scheduler = nullptr;
  GradScaler* scaler = nullptr;
  /** Sharded training: the (gathered) states saved in place of model->state_dict() and
   *  optimizer->state_dict(), and how a loaded state goes back in place of their
   *  load_state_dict(). Empty: the model's and optimizer's own. */
  std::function<StateDict()> model_state = {}, optimizer_state = {};  // "= {}": CheckpointParts{&model} stays warning-free
  std::function<void(const StateDict&)> load_model_state = {}, load_optimizer_state = {};
};

struct CheckpointInfo {
  int64_t epoch = 0;  ///< the counter saved (completed epochs, or any unit the loop counts)
  int64_t step = 0;   ///< optimizer steps at the save
  Metadata metadata;  ///< every entry of the file (the user's among them)
};

/**
 * Saves `parts` with `epoch` and the user's `metadata` to `path` atomically (a crash leaves the
 * old file or the new one). Throws, leaving `path` as it was, when a parameter or optimizer
 * state holds NaN or Inf, naming the tensor.
 */
void save_checkpoint(const std::string& path, const CheckpointParts& parts, int64_t epoch, const Metadata& metadata = {});

/**
 * Restores `parts` and the default generator from `path` and returns the counters and metadata.
 * The whole file is validated before anything changes: non-finite values, corrupt counters, a
 * different optimizer or missing optimizer state are errors (the last two unless
 * `reset_optimizer`, which keeps the optimizer's fresh state).
 */
CheckpointInfo load_checkpoint(const std::string& path, const CheckpointParts& parts, bool reset_optimizer = false);

}  // namespace tessera::nn
