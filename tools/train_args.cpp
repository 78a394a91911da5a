#include "train_args.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "tessera/error.h"
#include "tessera/nn/file_io.h"
#include "tessera/nn/text_data.h"

namespace tessera::tools {

namespace {
using json = nlohmann::json;

// A floating-point option must be a finite number in range: CLI11's PositiveNumber lets "inf"
// through, NonNegativeNumber lets "nan" through (every comparison with NaN is false).
CLI::Validator finite_at_least(double lo, bool inclusive) {
  return CLI::Validator(
      [lo, inclusive](std::string& text) -> std::string {
        double v = 0;
        try {
          size_t used = 0;
          v = std::stod(text, &used);
          if (used != text.size()) return "'" + text + "' is not a number";
        } catch (const std::exception&) {
          return "'" + text + "' is not a number";
        }
        if (!std::isfinite(v)) return "must be finite, got " + text;
        if (inclusive ? v < lo : v <= lo) return detail::concat("must be ", inclusive ? ">= " : "> ", lo, ", got ", text);
        return {};
      },
      inclusive ? "FINITE>=0" : "FINITE>0");
}
// "auto" becomes kAutoBatch; anything else must be an integer in [1, max].
CLI::Validator batch_size_or_auto(int64_t max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        if (text == "auto") {
          text = std::to_string(kAutoBatch);
          return {};
        }
        int64_t v = 0;
        try {
          size_t used = 0;
          v = std::stoll(text, &used);
          if (used != text.size()) return "'" + text + "' is neither an integer nor auto";
        } catch (const std::exception&) {
          return "'" + text + "' is neither an integer nor auto";
        }
        if (v < 1 || v > max) return detail::concat("must be auto or in [1, ", max, "], got ", text);
        return {};
      },
      "INT|auto");
}
}  // namespace

void add_train_options(CLI::App& cmd, TrainArgs& a) {
  // Integer bounds keep every product with them (epochs x batches, batch x features) far from
  // int64_t overflow; values outside are refused rather than wrapped.
  constexpr int64_t kMaxEpochs = 1'000'000, kMaxBatch = 1 << 20, kMaxCount = int64_t{1} << 40;
  cmd.add_option("--model", a.model, "mlp, cnn (Fashion-MNIST), gpt or lstm (character language models)")->check(CLI::IsMember({"mlp", "cnn", "gpt", "lstm"}))->capture_default_str();
  cmd.add_option("--backend", a.backend, "auto, cpu, cuda[:i], hip[:i], kokkos, emulated")->capture_default_str();
  cmd.add_option("--epochs", a.epochs, "Epochs")->check(CLI::Range(int64_t{1}, kMaxEpochs))->capture_default_str();
  cmd.add_option("--batch-size,--batch", a.batch_size,
                 "Batch size (gpt/lstm: windows per step, default 32), or auto: the largest that fits the device's memory "
                 "(tried on a copy of the model; the throughput of each size tried is printed)")
      ->transform(batch_size_or_auto(kMaxBatch))->capture_default_str();
  cmd.add_option("--memory-limit", a.memory_limit, "Cap the training device's memory, e.g. 512M or 6G (what --batch-size auto searches within)")
      ->transform(CLI::AsSizeValue(false))->check(CLI::Range(int64_t{1} << 20, std::numeric_limits<int64_t>::max()));
  cmd.add_option("--lr", a.lr, "Learning rate")->check(finite_at_least(0, false))->capture_default_str();
  cmd.add_option("--weight-decay", a.weight_decay, "Weight decay")->check(finite_at_least(0, true))->capture_default_str();
  cmd.add_option("--optimizer", a.optimizer, "sgd, adam, adamw, rmsprop")
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "rmsprop"}))->capture_default_str();
  cmd.add_option("--schedule", a.schedule, "cosine or none")->check(CLI::IsMember({"cosine", "none"}))->capture_default_str();
  cmd.add_option("--seed", a.seed, "Random seed (0 to 2^63-1)")->check(exact_nonnegative_int64())->capture_default_str();
  cmd.add_option("--threads", a.threads, "CPU threads (0 = all cores)")->check(CLI::Range(0, 4096));
  cmd.add_option("--workers", a.workers, "Data-loading threads")->check(CLI::Range(0, 64))->capture_default_str();
  cmd.add_option("--data", a.data, "Directory with the IDX files (gpt/lstm: a text file or directory, default /usr/share/games/fortunes)")->capture_default_str();
  cmd.add_option("--limit", a.limit, "Use only the first N training images")->check(CLI::Range(int64_t{1}, kMaxCount));
  cmd.add_option("--precision", a.precision, "Compute precision: f32, bf16 or f16 (autocast; f16 adds loss scaling)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))->capture_default_str();
  cmd.add_option("--param-dtype", a.param_dtype, "Parameter dtype: f32 (master weights) or the --precision dtype (f32 optimizer state)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))->capture_default_str();
  cmd.add_option("--test-limit", a.test_limit, "Evaluate on only the first N test images")->check(CLI::Range(int64_t{1}, kMaxCount));
  cmd.add_flag("--graph", a.graph, "Capture forward+backward once and replay it each step (emulated, CUDA, HIP)");
  cmd.add_flag("--distributed", a.distributed,
               "Data parallel under mpirun: each rank trains on its shard, --batch is the global batch, gradients are "
               "all-reduced (DistributedDataParallel); rank 0 logs and writes checkpoints");
  cmd.add_option("--zero", a.zero,
                 "3: fully sharded data parallel under mpirun (ZeRO-3: each rank holds 1/world of the parameters, gradients and "
                 "optimizer state; a gpt's blocks, or an mlp/cnn's layers, are gathered one at a time; with --pipeline/--tensor-parallel "
                 "each rank's part over the data-parallel replicas); 0: off")
      ->check(CLI::Range(0, 3));
  cmd.add_option("--pipeline", a.pipeline,
                 "gpt: pipeline stages (the blocks split evenly; the embeddings on the first, the head on the last): one rank each "
                 "under mpirun, else the backend's devices of this process (emulated:0, emulated:1)")
      ->check(CLI::Range(1, 256));
  cmd.add_option("--tensor-parallel", a.tensor_parallel,
                 "gpt: ranks per stage splitting each layer Megatron-style (heads, MLP features, vocabulary), under mpirun; "
                 "ranks beyond pipeline x tensor parallel are data parallel")
      ->check(CLI::Range(1, 256));
  cmd.add_option("--micro-batches", a.micro_batches, "With --pipeline: micro-batches per replica's batch (default 2 x --pipeline)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  cmd.add_option("--pipeline-schedule", a.pipeline_schedule,
                 "With --pipeline: 1f1b (activations of at most one micro-batch per later stage held), gpipe (all forwards, then "
                 "all backwards) or interleaved (Megatron's virtual pipeline: --pipeline-chunks model chunks per stage, a smaller "
                 "bubble for more transfers; micro-batches a multiple of --pipeline)")
      ->check(CLI::IsMember({"1f1b", "gpipe", "interleaved"}))
      ->capture_default_str();
  cmd.add_flag("--zero-keep-gathered", a.zero_keep_gathered,
               "With --zero 3 and --pipeline or --tensor-parallel: each block, once gathered, stays gathered (its gradients "
               "unsharded) until the step ends: one all-gather and one reduce-scatter per block a step instead of per "
               "micro-batch, at the memory of the rank's whole part and its gradients during the step");
  cmd.add_option("--pipeline-chunks", a.pipeline_chunks,
                 "With --pipeline-schedule interleaved: model chunks (virtual stages) per stage (default 2)")
      ->check(CLI::Range(int64_t{2}, int64_t{64}));
  cmd.add_option("--local-rank", a.local_rank, "Device index of this rank with --distributed (default: its MPI local rank)")
      ->check(CLI::Range(0, 1024));
  cmd.add_option("--on-nonfinite", a.on_nonfinite, "NaN/Inf loss or gradient: stop (error naming the step) or skip the step")
      ->check(CLI::IsMember({"stop", "skip"}))->capture_default_str();
  cmd.add_option("--check-against", a.check_against,
                 "cpu: run every op on the CPU backend too and report the first whose outputs differ beyond its dtype's tolerance")
      ->check(CLI::IsMember({"cpu"}));
  cmd.add_flag("--deterministic", a.deterministic,
               "Bit-identical results from run to run, thread count and stream schedule (deterministic kernels; docs/determinism.md)");
  cmd.add_flag("--augment", a.augment, "mlp/cnn: random crop (zero padding 2) and horizontal flip of each training image");
  cmd.add_option("--preprocess", a.preprocess,
                 "mlp/cnn: normalise (and --augment) on the training device after the upload, or on the host before it; "
                 "the batches are the same either way")
      ->check(CLI::IsMember({"host", "device"}))->capture_default_str();
  cmd.add_flag("--detect-anomaly", a.detect_anomaly, "Check every op's output and gradient; name the first to make a NaN/Inf (slow)");
  cmd.add_option("--checkpoint", a.checkpoint, "Checkpoint path (safetensors), written every epoch");
  cmd.add_flag("--resume", a.resume, "Continue from --checkpoint when it exists");
  cmd.add_flag("--reset-optimizer", a.reset_optimizer, "With --resume: load the model only and start the optimizer afresh");
  cmd.add_option("--json", a.json, "Write a JSON summary here");
  cmd.add_option("--export", a.export_onnx, "mlp/cnn/gpt: write the trained model as ONNX (opset 17; variable batch, and sequence for gpt) here, then check it by re-importing");
  cmd.add_option("--metrics", a.metrics, "Write one JSON line per optimizer step here (step, loss, lr, throughput, memory)");
  cmd.add_option("--profile", a.profile, "Record a trace of the run (Chrome trace-event JSON: Perfetto, chrome://tracing) and print a per-op summary");
  cmd.add_option("--layers", a.layers, "gpt/lstm: layers")->check(CLI::Range(int64_t{1}, int64_t{256}))->capture_default_str();
  cmd.add_option("--heads", a.heads, "gpt: attention heads")->check(CLI::Range(int64_t{1}, int64_t{256}))->capture_default_str();
  cmd.add_option("--dim", a.dim, "gpt/lstm: model width")->check(CLI::Range(int64_t{1}, int64_t{65536}))->capture_default_str();
  cmd.add_option("--context", a.context, "gpt/lstm: tokens per training window")->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  cmd.add_option("--steps", a.steps, "gpt/lstm: optimizer steps")->check(CLI::Range(int64_t{1}, kMaxCount))->capture_default_str();
  cmd.add_option("--grad-accum", a.grad_accumulation, "Batches per optimizer step (gradient accumulation)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  cmd.add_option("--warmup", a.warmup, "Linear warm-up steps before the cosine decay (default 100 for gpt/lstm, 0 for mlp/cnn)")
      ->check(CLI::Range(int64_t{0}, kMaxCount))
      ->capture_default_str();
  cmd.add_option("--eval-every", a.eval_every, "gpt/lstm: validation (and checkpoint) every N steps")->check(CLI::Range(int64_t{1}, kMaxCount))->capture_default_str();
  cmd.add_option("--clip", a.clip_norm, "Global gradient-norm clip, 0 = off (default 1 for gpt/lstm, 0 for mlp/cnn)")
      ->check(finite_at_least(0, true))
      ->capture_default_str();
  cmd.add_option("--dropout", a.dropout, "gpt: dropout in [0, 1)")->check(CLI::Range(0.0, 0.99))->capture_default_str();
  cmd.add_flag("--quiet", a.quiet, "Only print the result line");
}

void validate_train_args(const TrainArgs& a, const std::function<bool(const std::string&)>& explicit_flag) {
  // Every flag works with every model it is given to, or is refused here with the reason.
  if (explicit_flag) {
    const bool lm = is_language_model(a.model);
    struct Only {
      const char* flag;
      bool for_lm;  // true: gpt/lstm only; false: mlp/cnn only
      const char* instead;
    };
    static const Only only[] = {
        {"--epochs", false, "language models train for --steps"},
        {"--limit", false, "language models sample windows of the whole text"},
        {"--test-limit", false, "language models validate on the text's last 10% (--eval-every)"},
        {"--augment", false, "augmentation is for images"},
        {"--preprocess", false, "preprocessing is for images"},
        {"--workers", false, "language-model batches are sampled on the training thread"},
        {"--layers", true, "the mlp and cnn have fixed layers"},
        {"--heads", true, "only the gpt has attention heads"},
        {"--dim", true, "the mlp and cnn have fixed widths"},
        {"--context", true, "the mlp and cnn take images"},
        {"--steps", true, "mlp and cnn train for --epochs"},
        {"--eval-every", true, "mlp and cnn evaluate after each epoch"},
        {"--dropout", true, "only the gpt has dropout"},
    };
    for (const Only& o : only) {
      TESSERA_CHECK(!explicit_flag(o.flag) || o.for_lm == lm, "train", o.flag, " does not apply to --model ", a.model, ": ", o.instead);
    }
    TESSERA_CHECK(!explicit_flag("--local-rank") || a.distributed || a.zero == 3 || a.pipeline > 1 || a.tensor_parallel > 1, "train",
                  "--local-rank needs --distributed, --zero 3, --pipeline or --tensor-parallel (it picks a rank's device)");
    for (const char* flag : {"--micro-batches", "--pipeline-schedule", "--pipeline-chunks"})
      TESSERA_CHECK(!explicit_flag(flag) || a.pipeline > 1, "train", flag, " needs --pipeline 2 or more");
    TESSERA_CHECK(!explicit_flag("--pipeline-chunks") || a.pipeline_schedule == "interleaved", "train",
                  "--pipeline-chunks needs --pipeline-schedule interleaved");
    TESSERA_CHECK(!a.zero_keep_gathered || (a.zero == 3 && (a.pipeline > 1 || a.tensor_parallel > 1)), "train",
                  "--zero-keep-gathered needs --zero 3 with --pipeline or --tensor-parallel");
    for (const char* flag : {"--heads", "--dropout"}) {
      TESSERA_CHECK(a.model != "lstm" || !explicit_flag(flag), "train", flag, " does not apply to --model lstm: only the gpt has it");
    }
  }
  if (a.zero != 0) {
    TESSERA_CHECK(a.zero == 3, "train", "--zero ", a.zero,
                  ": train offers stage 3 (fully sharded: parameters, gradients and optimizer state); "
                  "stage 1 is nn::ZeroRedundancyOptimizer in the library");
    TESSERA_CHECK(!a.graph, "train",
                  "--zero 3 with --graph: the per-layer gathers and reduce-scatters are not captured; drop one of the two");
    TESSERA_CHECK(a.precision != "f16", "train",
                  "--zero 3 with --precision f16: loss scaling would decide on each rank's shards alone whether to skip a step; use bf16");
    TESSERA_CHECK(a.batch_size != kAutoBatch, "train",
                  "--zero 3 with --batch-size auto: the search measures an unsharded copy of the model; give the batch size");
  }
  if (a.pipeline > 1 || a.tensor_parallel > 1) {
    const std::string mode = a.pipeline > 1 && a.tensor_parallel > 1 ? "--pipeline with --tensor-parallel"
                             : a.pipeline > 1                        ? "--pipeline"
                                                                     : "--tensor-parallel";
    TESSERA_CHECK(a.model == "gpt", "train", mode, " splits the gpt's layers; --model ", a.model, " trains data parallel (--distributed)");
    TESSERA_CHECK(!a.graph, "train", mode, " with --graph: point-to-point transfers and tensor-parallel all-reduces are not captured");
    TESSERA_CHECK(a.precision != "f16", "train", mode, " with --precision f16: use bf16 (no loss scaling to agree on)");
    TESSERA_CHECK(a.batch_size != kAutoBatch, "train", mode,
                  " with --batch-size auto: the search measures the whole model; give the batch size");
    TESSERA_CHECK(a.tensor_parallel == 1 || a.dropout == 0, "train", "--tensor-parallel with --dropout ", a.dropout,
                  ": dropout on activations replicated across the group needs one random stream per region; use --dropout 0");
    TESSERA_CHECK(a.heads % a.tensor_parallel == 0, "train", "--tensor-parallel ", a.tensor_parallel, " must divide --heads ", a.heads);
    const int64_t chunks = a.pipeline_schedule == "interleaved" ? std::max<int64_t>(a.pipeline_chunks, 2) : 1;
    TESSERA_CHECK(a.pipeline * chunks <= a.layers, "train", "--pipeline ", a.pipeline,
                  chunks > 1 ? detail::concat(" x --pipeline-chunks ", chunks, " virtual") : std::string(),
                  " stages need at least as many --layers, got ", a.layers);
  }
  // --graph captures one forward and backward and replays it: what cannot be replayed is refused here.
  if (a.graph) {
    TESSERA_CHECK(a.dropout == 0, "train", "--graph with --dropout ", a.dropout,
                  ": random ops cannot be captured (every replay would "
                  "draw the same mask); drop one of the two");
    TESSERA_CHECK(a.grad_accumulation == 1, "train", "--graph with --grad-accum ", a.grad_accumulation, ": a captured step is one batch");
    TESSERA_CHECK(a.precision != "f16", "train",
                  "--graph with --precision f16: loss scaling changes the captured step from step to step; "
                  "use bf16 (no scaling) or no --graph");
    TESSERA_CHECK(!a.distributed, "train", "--graph with --distributed: the gradient all-reduce is not captured; drop one of the two");
  }
  if (is_language_model(a.model)) {
    TESSERA_CHECK(a.model != "gpt" || a.dim % a.heads == 0, "train", "--dim ", a.dim, " must be divisible by --heads ", a.heads);
    TESSERA_CHECK(a.export_onnx.empty() || a.model == "gpt", "train", "--export: --model lstm has no ONNX export (mlp, cnn and gpt do)");
  }
  TESSERA_CHECK(!a.resume || !a.checkpoint.empty(), "train", "--resume needs --checkpoint");
#ifndef TESSERA_HAS_ONNX
  TESSERA_CHECK(a.export_onnx.empty(), "train", "--export: this build has no ONNX support (install libonnx-dev and reconfigure)");
#endif
  TESSERA_CHECK(!a.reset_optimizer || a.resume, "train", "--reset-optimizer needs --resume");
  const std::pair<const char*, const std::string*> outputs[] = {{"--checkpoint", &a.checkpoint}, {"--json", &a.json}, {"--profile", &a.profile},
                                                                {"--metrics", &a.metrics}, {"--export", &a.export_onnx}};
  for (size_t i = 0; i < std::size(outputs); ++i) {
    const auto& [flag, path] = outputs[i];
    if (path->empty()) continue;
    nn::check_output_path(*path, "train", flag);
    for (size_t j = 0; j < i; ++j) {
      TESSERA_CHECK(outputs[j].second->empty() || !nn::same_file(*outputs[j].second, *path), "train", outputs[j].first, " and ", flag,
                    " name the same file '", *path, "'");
    }
  }
  // An output may not overwrite the training data (the image files, or the language models'
  // text file or a file of their text directory).
  for (const std::string* out : {&a.checkpoint, &a.json, &a.profile, &a.metrics, &a.export_onnx}) {
    if (out->empty()) continue;
    TESSERA_CHECK(!nn::same_file(*out, a.data), "train", "output '", *out, "' is the input data file ", a.data);
    {
      std::error_code ec;
      const std::filesystem::path parent = std::filesystem::path(*out).parent_path();
      TESSERA_CHECK(!std::filesystem::is_directory(a.data, ec) || !nn::same_file(parent.empty() ? "." : parent.string(), a.data) ||
                        std::filesystem::path(*out).has_extension(),
                    "train", "output '", *out, "' would be read as text data of the --data directory ", a.data,
                    " (files without an extension there are the training text)");
    }
    for (const char* stem : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
      for (const char* ext : {"", ".gz"}) {
        TESSERA_CHECK(!nn::same_file(*out, a.data + "/" + stem + ext), "train", "output '", *out, "' is the input data file ",
                      a.data, "/", stem, ext);
      }
    }
  }
}

void apply_model_defaults(TrainArgs& a, const std::function<bool(const std::string&)>& explicit_flag) {
  if (is_language_model(a.model)) {
    if (!explicit_flag("--data")) a.data = nn::kFortunesDir;
    if (!explicit_flag("--batch-size")) a.batch_size = 32;
    if (!explicit_flag("--weight-decay")) a.weight_decay = 0.1;
    if (!explicit_flag("--lr")) a.lr = 2e-3;  // a 0.8M-parameter model takes a higher rate than the MLP/CNN default
    if (!explicit_flag("--optimizer")) a.optimizer = "adamw";
    if (!explicit_flag("--dim") && a.model == "lstm") a.dim = 256;
    if (!explicit_flag("--layers") && a.model == "lstm") a.layers = 2;
  } else {
    if (!explicit_flag("--clip")) a.clip_norm = 0;  // the image models train unclipped
    if (!explicit_flag("--warmup")) a.warmup = 0;
  }
}

std::string train_config_json(const TrainArgs& a) {
  json config = {{"model", a.model},
                 {"optimizer", a.optimizer},
                 {"lr", a.lr},
                 {"weight_decay", a.weight_decay},
                 {"epochs", a.epochs},
                 {"batch_size", a.batch_size},
                 {"seed", a.seed},
                 {"limit", a.limit},
                 {"test_limit", a.test_limit},
                 {"schedule", a.schedule},
                 {"precision", a.precision},
                 {"param_dtype", a.param_dtype},
                 {"graph", a.graph},
                 {"augment", a.augment},
                 {"grad_accumulation", a.grad_accumulation},
                 {"warmup", a.warmup},
                 {"clip", a.clip_norm}};
  if (a.pipeline > 1 || a.tensor_parallel > 1) {
    config["pipeline"] = a.pipeline, config["tensor_parallel"] = a.tensor_parallel;
    config["micro_batches"] = a.micro_batches, config["pipeline_schedule"] = a.pipeline_schedule;
    if (a.pipeline_schedule == "interleaved") config["pipeline_chunks"] = a.pipeline_chunks;
    if (a.zero_keep_gathered) config["zero_keep_gathered"] = true;
  }
  if (is_language_model(a.model)) {
    config["layers"] = a.layers, config["heads"] = a.heads, config["dim"] = a.dim, config["context"] = a.context;
    config["steps"] = a.steps, config["eval_every"] = a.eval_every, config["dropout"] = a.dropout;
  }
  return config.dump();
}

std::vector<std::string> reconcile_resume(TrainArgs& a, const std::string& config_json,
                                          const std::function<bool(const std::string&)>& explicit_flag) {
  json saved;
  try {
    saved = json::parse(config_json);
  } catch (const json::exception& e) {
    throw Error(detail::concat("train: the checkpoint's run settings are corrupt: ", e.what()));
  }
  TESSERA_CHECK(saved.is_object(), "train", "the checkpoint's run settings are not a JSON object");
  std::vector<std::string> report;
  // One setting: the flag wins when given, otherwise the checkpoint's value is taken.
  auto reconcile = [&]<class T>(const char* key, const char* flag, T& value) {
    if (!saved.contains(key)) return;
    T stored{};
    try {
      // Type-checked first: nlohmann converts a float such as 1e300 to an integer with undefined behaviour.
      const json& v = saved.at(key);
      const bool ok = std::is_same_v<T, bool> ? v.is_boolean()
                      : std::is_integral_v<T> ? v.is_number_integer()
                      : std::is_floating_point_v<T> ? v.is_number()
                                                    : v.is_string();
      if (!ok) throw Error(detail::concat("train: the checkpoint's setting '", key, "' has the wrong type: ", v.dump()));
      stored = v.get<T>();
    } catch (const json::exception&) {
      throw Error(detail::concat("train: the checkpoint's setting '", key, "' is corrupt"));
    }
    if (stored == value) return;
    const std::string was = json(stored).dump(), now = json(value).dump();
    if (explicit_flag(flag)) {
      report.push_back(detail::concat(flag, " ", now, " replaces the checkpoint's ", was));
    } else {
      value = stored;
      report.push_back(detail::concat(flag, " ", was, " (from the checkpoint)"));
    }
  };
  if (saved.contains("model") && explicit_flag("--model")) {
    TESSERA_CHECK(saved["model"] == a.model, "train", "--model ", a.model, " does not match the checkpoint's ", saved["model"].dump(),
                  " model; use another --checkpoint");
  }
  if (saved.contains("optimizer") && explicit_flag("--optimizer") && !a.reset_optimizer) {
    TESSERA_CHECK(saved["optimizer"] == a.optimizer, "train", "--optimizer ", a.optimizer, " differs from the checkpoint's ",
                  saved["optimizer"].dump(), ": its state cannot carry over (add --reset-optimizer to start ", a.optimizer, " afresh)");
  }
  reconcile("model", "--model", a.model);
  reconcile("optimizer", "--optimizer", a.optimizer);
  reconcile("lr", "--lr", a.lr);
  reconcile("weight_decay", "--weight-decay", a.weight_decay);
  reconcile("schedule", "--schedule", a.schedule);
  reconcile("epochs", "--epochs", a.epochs);
  reconcile("batch_size", "--batch-size", a.batch_size);
  reconcile("seed", "--seed", a.seed);
  reconcile("limit", "--limit", a.limit);
  reconcile("test_limit", "--test-limit", a.test_limit);
  reconcile("precision", "--precision", a.precision);
  reconcile("param_dtype", "--param-dtype", a.param_dtype);
  reconcile("graph", "--graph", a.graph);
  reconcile("augment", "--augment", a.augment);
  reconcile("grad_accumulation", "--grad-accum", a.grad_accumulation);
  reconcile("warmup", "--warmup", a.warmup);
  reconcile("clip", "--clip", a.clip_norm);
  reconcile("layers", "--layers", a.layers);
  reconcile("heads", "--heads", a.heads);
  reconcile("dim", "--dim", a.dim);
  reconcile("context", "--context", a.context);
  reconcile("steps", "--steps", a.steps);
  reconcile("eval_every", "--eval-every", a.eval_every);
  reconcile("dropout", "--dropout", a.dropout);
  // Values taken from the file get the same checks as the command line's.
  auto member = [](const std::string& v, std::initializer_list<const char*> options) {
    for (const char* o : options) {
      if (v == o) return true;
    }
    return false;
  };
  TESSERA_CHECK(member(a.model, {"mlp", "cnn", "gpt", "lstm"}) && member(a.optimizer, {"sgd", "adam", "adamw", "rmsprop"}) &&
                    member(a.schedule, {"cosine", "none"}) && member(a.precision, {"f32", "bf16", "f16"}) &&
                    member(a.param_dtype, {"f32", "bf16", "f16"}),
                "train", "the checkpoint's run settings name an unknown model, optimizer, schedule or precision");
  TESSERA_CHECK(std::isfinite(a.lr) && a.lr > 0 && std::isfinite(a.weight_decay) && a.weight_decay >= 0 && a.epochs >= 1 &&
                    a.epochs <= 1'000'000 && (a.batch_size >= 1 || a.batch_size == kAutoBatch) && a.batch_size <= (1 << 20) &&
                    a.seed >= 0 && (a.limit == -1 || a.limit >= 1) && (a.test_limit == -1 || a.test_limit >= 1) &&
                    a.grad_accumulation >= 1 && a.grad_accumulation <= 4096 && a.warmup >= 0 && std::isfinite(a.clip_norm) &&
                    a.clip_norm >= 0 && a.layers >= 1 && a.layers <= 256 && a.heads >= 1 && a.heads <= 256 && a.dim >= 1 &&
                    a.dim <= 65536 && a.context >= 1 && a.context <= (int64_t{1} << 20) && a.steps >= 1 && a.eval_every >= 1 &&
                    a.dropout >= 0 && a.dropout < 1,
                "train", "the checkpoint's run settings hold out-of-range values");
  return report;
}

}  // namespace tessera::tools
