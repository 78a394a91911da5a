#pragma once
// The options of `tessera train`, their validation and the resume reconciliation, apart from
// the run itself so the parser can be fuzzed without training (tests/fuzz/fuzz_cli.cpp).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/device.h"

namespace tessera::tools {

/** TrainArgs::batch_size for `--batch-size auto`: searched on the device before training. */
inline constexpr int64_t kAutoBatch = 0;

struct TrainArgs {
  std::string model = "cnn", backend = "auto", optimizer = "adam", schedule = "cosine";
  std::string data = "/usr/share/datasets/fashion-mnist", checkpoint, json, profile, metrics;
  std::string export_onnx;  ///< mlp/cnn: the trained model as ONNX (--export)
  std::string precision = "f32", param_dtype = "f32", on_nonfinite = "stop";
  int64_t epochs = 5, batch_size = 128, limit = -1, test_limit = -1;
  int64_t memory_limit = 0;  ///< bytes the training device's allocator may hold (0 = no cap)
  double lr = 1e-3, weight_decay = 0.0;
  int64_t seed = 0;
  int threads = 0, workers = 1;
  bool resume = false, quiet = false, graph = false, detect_anomaly = false, reset_optimizer = false;
  bool deterministic = false;  ///< tessera::set_deterministic for the run
  bool augment = false;         ///< mlp/cnn: random crop (padding 2) and horizontal flip of training images
  std::string preprocess = "device";  ///< where normalisation and augmentation run: "host" or "device"
  std::string check_against;   ///< "cpu": the CPU cross-check (set_check_against_cpu)
  bool distributed = false;  ///< data parallel over the MPI process group (run under mpirun)
  int local_rank = -1;       ///< device index per rank (default: the MPI local rank)
  int zero = 0;              ///< 3: fully sharded data parallel (nn::FullyShardedDataParallel) under mpirun
  // Model parallelism (gpt): stages and tensor-parallel ranks per model replica; the rest of the
  // ranks are data parallel (nn::GPTModelParallel).
  int pipeline = 1, tensor_parallel = 1;
  int64_t micro_batches = 0;  ///< per replica's batch (0: 2 x --pipeline)
  std::string pipeline_schedule = "1f1b";
  int64_t pipeline_chunks = 0;    ///< interleaved: model chunks per stage (0: 2)
  bool zero_keep_gathered = false;  ///< --zero 3 with --pipeline/--tensor-parallel: gather each block once a step
  int64_t grad_accumulation = 1;  ///< batches per optimizer step
  int64_t warmup = 100;           ///< linear warm-up steps before the cosine decay (image models: 0 unless given)
  double clip_norm = 1.0;         ///< global gradient-norm clip (image models: 0 = off unless given)
  // Language models (--model gpt|lstm): sizes and the step-based schedule.
  int64_t layers = 4, heads = 4, dim = 128, context = 128, steps = 2000, eval_every = 250;
  double dropout = 0.0;
};

/** True for the character language models (--steps, --context; text data). */
inline bool is_language_model(const std::string& model) { return model == "gpt" || model == "lstm"; }

/** Registers every option of `train` on `cmd`, bound to `a`. */
void add_train_options(CLI::App& cmd, TrainArgs& a);
/**
 * Checks what single-option validators cannot: combinations, and that every output path can
 * be written and differs from every input, before any data is loaded. With `explicit_flag`
 * (whether a flag was given), a flag the chosen model family does not use is refused with
 * the reason instead of being ignored.
 */
void validate_train_args(const TrainArgs& a, const std::function<bool(const std::string&)>& explicit_flag = {});
/** The model family's defaults for the flags not given (the language models' data, batch, lr,
 *  optimizer and sizes; no clipping or warm-up for the image models). Before --resume's reconciliation. */
void apply_model_defaults(TrainArgs& a, const std::function<bool(const std::string&)>& explicit_flag);
/** The settings stored in a checkpoint's "config" (and compared on --resume). */
std::string train_config_json(const TrainArgs& a);
/**
 * --resume: reads the checkpoint's settings; a setting the user gave on the command line wins
 * (and is reported when it differs), any other is taken from the checkpoint. A different
 * --model, or a different --optimizer without --reset-optimizer, is an error. Returns the
 * report lines. `explicit_flag(name)` says whether "--name" was given.
 */
std::vector<std::string> reconcile_resume(TrainArgs& a, const std::string& config_json,
                                          const std::function<bool(const std::string&)>& explicit_flag);


/** The --backend choice ("auto": the best GPU, else the CPU). */
Device pick_device(const std::string& backend);

}  // namespace tessera::tools
