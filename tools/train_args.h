#pragma once
// The options of `tessera train`, their validation and the resume reconciliation, apart from
// the run itself so the parser can be fuzzed without training (tests/fuzz/fuzz_cli.cpp).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::tools {

struct TrainArgs {
  std::string model = "cnn", backend = "auto", optimizer = "adam", schedule = "cosine";
  std::string data = "/usr/share/datasets/fashion-mnist", checkpoint, json;
  std::string precision = "f32", param_dtype = "f32", on_nonfinite = "stop";
  int64_t epochs = 5, batch_size = 128, limit = -1, test_limit = -1;
  double lr = 1e-3, weight_decay = 0.0;
  int64_t seed = 0;
  int threads = 0, workers = 1;
  bool resume = false, quiet = false, graph = false, detect_anomaly = false, reset_optimizer = false;
};

/** Registers every option of `train` on `cmd`, bound to `a`. */
void add_train_options(CLI::App& cmd, TrainArgs& a);
/**
 * Checks what single-option validators cannot: combinations, and that every output path can
 * be written and differs from every input, before any data is loaded.
 */
void validate_train_args(const TrainArgs& a);
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

}  // namespace tessera::tools
