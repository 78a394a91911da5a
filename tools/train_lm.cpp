// `tessera train --model gpt|lstm` (character language models on Debian's fortunes or any text
// file) and `tessera generate` (sampling from their checkpoints with a KV cache).
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>
#include <nlohmann/json.hpp>

#include "batch_auto.h"
#include "commands.h"
#include "tessera/dist.h"
#include "tessera/nn/amp.h"
#include "tessera/nn/file_io.h"
#include "tessera/nn/lm_trainer.h"
#include "metrics_log.h"
#include "train_args.h"
#ifdef TESSERA_HAS_ONNX
#include "tessera/onnx.h"
#endif

namespace tessera::tools {

namespace {
// --export: writes the GPT as ONNX and checks the file by re-importing it and predicting the
// next character at every position of validation windows with both.
void export_language_model(nn::LanguageModel& model, const nn::TextCorpus& corpus, const TrainArgs& a, Device device) {
#ifdef TESSERA_HAS_ONNX
  onnx::export_model(model, zeros({1, a.context}, DType::i64, device), a.export_onnx);
  const onnx::Model reimported = onnx::Model::load(a.export_onnx);
  NoGradGuard no_grad;
  model.eval();
  const int64_t windows = std::min<int64_t>(8, static_cast<int64_t>(corpus.val.size()) / a.context);
  const std::vector<int64_t> tokens(corpus.val.begin(), corpus.val.begin() + windows * a.context);
  const Tensor x = from_vector(tokens, {windows, a.context}).to(device);
  const Tensor ours = model.forward(x), theirs = reimported.run({x}, device)[0];
  const int64_t same = sum(eq(argmax(ours, 2), argmax(theirs, 2))).to(kCPU).item<int64_t>(), total = windows * a.context;
  const double diff = amax(abs(sub(ours.to(DType::f32), theirs.to(DType::f32)))).to(kCPU).item<double>();
  std::printf("exported %s to %s (ONNX opset 17, variable batch and sequence); re-imported, %lld of %lld next-character predictions identical, "
              "max logit difference %.2g\n",
              a.model.c_str(), a.export_onnx.c_str(), static_cast<long long>(same), static_cast<long long>(total), diff);
  TESSERA_CHECK(same == total, "train", "--export: the re-imported model disagrees on ", total - same, " of ", total, " positions");
#else
  (void)model, (void)corpus, (void)a, (void)device;
#endif
}
}  // namespace

void run_train_lm(TrainArgs& a, const std::function<bool(const std::string&)>& explicit_flag, Device device) {
  if (!explicit_flag("--data")) a.data = nn::kFortunesDir;
  if (!explicit_flag("--batch-size")) a.batch_size = 32;
  if (!explicit_flag("--weight-decay")) a.weight_decay = 0.1;
  if (!explicit_flag("--lr")) a.lr = 2e-3;  // a 0.8M-parameter model takes a higher rate than the MLP/CNN default
  if (!explicit_flag("--dim") && a.model == "lstm") a.dim = 256;
  if (!explicit_flag("--layers") && a.model == "lstm") a.layers = 2;
  std::shared_ptr<dist::ProcessGroup> group;
  if (a.distributed) {
    group = dist::init_process_group();
    TESSERA_CHECK(a.batch_size % group->world_size() == 0, "train", "--batch-size ", a.batch_size, " (the global batch) must divide by the ",
                  group->world_size(), " ranks");
    if (device.type != DeviceType::cpu) device = Device(device.type, a.local_rank >= 0 ? a.local_rank : group->local_rank());
    if (group->rank() != 0) a.quiet = true;  // rank 0 logs
  }
  const int world = group ? group->world_size() : 1;
  // Ranks share the node's cores unless told otherwise.
  set_num_threads(a.threads == 0 && world > 1 ? std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world) : a.threads);
  if (a.memory_limit > 0) set_memory_limit(device, a.memory_limit);
  const nn::TextCorpus corpus = nn::load_text_corpus(a.data);
  TESSERA_CHECK(static_cast<int64_t>(corpus.val.size()) > a.context + 1, "train", "the validation split of '", a.data, "' (",
                corpus.val.size(), " characters) is shorter than --context ", a.context, " + 1");
  const nn::Placement place{nn::parse_precision(a.param_dtype), device};
  nlohmann::json model_config = {{"model", a.model}, {"layers", a.layers}, {"dim", a.dim}};
  const auto make_model = [&]() -> std::shared_ptr<nn::LanguageModel> {
    if (a.model == "gpt") return std::make_shared<nn::GPT>(nn::GPTConfig{corpus.vocab.size(), a.context, a.layers, a.heads, a.dim, a.dropout}, place);
    return std::make_shared<nn::CharLSTM>(nn::CharLSTMConfig{corpus.vocab.size(), a.dim, a.layers}, place);
  };
  nlohmann::json batch_report;
  if (a.batch_size == kAutoBatch) {
    const DType precision = nn::parse_precision(a.precision);
    BatchTrialModel trial;
    trial.make_model = [&]() -> std::shared_ptr<nn::Module> { return make_model(); };
    trial.make_optimizer = [&](nn::Module& m) -> std::unique_ptr<nn::Optimizer> {
      nn::OptimOptions oo;
      oo.weight_decay = a.weight_decay;
      return std::make_unique<nn::Adam>(dynamic_cast<nn::LanguageModel&>(m).param_groups(oo), /*decoupled=*/true);
    };
    trial.loss = [&](nn::Module& m, int64_t b) {
      const Tensor x = randint(0, corpus.vocab.size(), {b, a.context}, DType::i64, device);
      const AutocastGuard autocast(precision == DType::f32 ? DType::bf16 : precision, precision != DType::f32);
      const Tensor logits = m.forward(x);
      return cross_entropy(logits.reshape({-1, logits.size(2)}), x.reshape({-1}));
    };
    trial.in_flight = [&](int64_t b) { return std::vector<Tensor>{empty({b, a.context}, DType::i64, device), empty({b, a.context}, DType::i64, device)}; };
    a.batch_size = auto_batch_size(trial, device, int64_t{1} << 14, group.get(), a.quiet, batch_report) * world;
  }
  manual_seed(static_cast<uint64_t>(a.seed));  // after the search, which draws from the generator
  std::shared_ptr<nn::LanguageModel> model = make_model();
  if (a.model == "gpt") {
    model_config["heads"] = a.heads;
    model_config["context"] = a.context;
  }
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  if (group) ddp = std::make_unique<nn::DistributedDataParallel>(model, *group);  // rank 0's initial weights everywhere
  nn::LMTrainOptions o;
  o.ddp = ddp.get();
  o.steps = a.steps;
  o.batch = a.batch_size / world;
  o.context = a.context;
  o.grad_accumulation = a.grad_accumulation;
  o.warmup = a.warmup;
  o.eval_every = a.eval_every;
  o.lr = a.lr;
  o.weight_decay = a.weight_decay;
  o.clip_norm = a.clip_norm;
  o.seed = static_cast<uint64_t>(a.seed);
  o.precision = nn::parse_precision(a.precision);
  o.checkpoint = a.checkpoint;
  o.metadata["model_config"] = model_config.dump();
  o.metadata["vocab"] = corpus.vocab.chars;
  std::vector<double> step_losses;
  MetricsLog metrics(!group || group->rank() == 0 ? a.metrics : std::string());
  o.on_step = [&](int64_t step, double loss) {
    step_losses.push_back(loss);
    metrics.step(step, 0, loss, std::nullopt, a.batch_size * a.grad_accumulation * a.context, "tokens", device);
  };
  if (!a.quiet) {
    std::printf("training %s (%lld parameters) on %s: %s, %lld characters (vocab %lld), %lld steps x %lld x %lld tokens, adamw lr %g wd %g\n",
                a.model.c_str(), static_cast<long long>(model->num_parameters()), device.str().c_str(), corpus.source.c_str(),
                static_cast<long long>(corpus.bytes), static_cast<long long>(corpus.vocab.size()), static_cast<long long>(a.steps),
                static_cast<long long>(a.batch_size * a.grad_accumulation), static_cast<long long>(a.context), a.lr, a.weight_decay);
    if (group) std::printf("data parallel: %d ranks over %s, batch %lld per rank\n", world, group->backend().c_str(), static_cast<long long>(o.batch));
    std::fflush(stdout);
  }
  const auto logs = nn::train_language_model(*model, corpus, o, [&](const nn::LMLog& l) {
    if (a.quiet) return;
    std::printf("step %lld/%lld  train_loss %.4f  val_loss %.4f nats/char  lr %.2e  %.0f tokens/s  (%.1f s)\n", static_cast<long long>(l.step),
                static_cast<long long>(a.steps), l.train_loss, l.val_loss, l.lr, l.tokens_per_second, l.seconds);
    std::fflush(stdout);
  });
  const nn::LMLog& last = logs.back();
  double tps = 0;
  for (const auto& l : logs) tps += l.tokens_per_second / static_cast<double>(logs.size());
  if (group && group->rank() != 0) return;  // rank 0 reports and writes the JSON
  if (group) std::printf("data parallel: parameters bitwise equal on all %d ranks\n", world);
  if (!a.export_onnx.empty()) export_language_model(*model, corpus, a, device);
  std::printf("result: %s on %s, validation loss %.4f nats/char, %.0f tokens/s, %.1f s\n", a.model.c_str(), device.str().c_str(),
              last.val_loss, tps, last.seconds);
  if (!a.json.empty()) {
    nlohmann::json j = {{"backend", device.str()}, {"model", a.model}, {"model_config", model_config}, {"precision", a.precision},
                        {"steps", a.steps}, {"batch", a.batch_size}, {"context", a.context}, {"lr", a.lr},
                        {"val_loss", last.val_loss}, {"tokens_per_second", tps}, {"seconds", last.seconds},
                        {"parameters", model->num_parameters()}, {"step_losses", step_losses}};
    if (!batch_report.is_null()) j["batch_search"] = batch_report;
    for (const auto& l : logs) {
      j["history"].push_back({{"step", l.step}, {"train_loss", l.train_loss}, {"val_loss", l.val_loss}, {"lr", l.lr},
                              {"tokens_per_second", l.tokens_per_second}, {"seconds", l.seconds}});
    }
    nn::write_file_atomic(a.json, j.dump(2) + "\n", "train --json");
  }
}

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Sample text from a gpt/lstm checkpoint (tessera train --model gpt --checkpoint F)");
  struct Args {
    std::string checkpoint, prompt = "\n", backend = "cpu";
    int64_t tokens = 300, top_k = 0, seed = 0;
    double temperature = 0.8;
    bool no_cache = false, compare = false;
  };
  static Args a;
  a = Args{};
  cmd->add_option("--checkpoint", a.checkpoint, "Checkpoint written by train --model gpt|lstm")->required();
  cmd->add_option("--prompt", a.prompt, "Text to continue (characters of the training text)")->capture_default_str();
  cmd->add_option("--tokens", a.tokens, "Characters to generate")->check(CLI::Range(int64_t{0}, int64_t{1} << 20))->capture_default_str();
  cmd->add_option("--temperature", a.temperature, "Sampling temperature (0 = greedy)")->check(CLI::Range(0.0, 100.0))->capture_default_str();
  cmd->add_option("--top-k", a.top_k, "Sample among the k likeliest (0 = all)")->check(CLI::Range(int64_t{0}, int64_t{1} << 20))->capture_default_str();
  cmd->add_option("--seed", a.seed, "Sampling seed")->check(exact_nonnegative_int64())->capture_default_str();
  cmd->add_option("--backend", a.backend, "cpu, cuda[:i], hip[:i], kokkos, emulated, auto")->capture_default_str();
  cmd->add_flag("--no-cache", a.no_cache, "Re-run the whole window for every token (the reference the KV cache must match)");
  cmd->add_flag("--compare", a.compare, "Generate with and without the cache and report whether the tokens agree");
  cmd->callback([] {
    const Device device = pick_device(a.backend);
    nn::CharVocab vocab;
    const auto model = nn::load_language_model(a.checkpoint, device, vocab);
    const std::vector<int64_t> prompt = vocab.encode(a.prompt);
    nn::SampleOptions o;
    o.tokens = a.tokens;
    o.temperature = a.temperature;
    o.top_k = a.top_k;
    o.seed = static_cast<uint64_t>(a.seed);
    o.use_cache = !a.no_cache;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int64_t> out = nn::generate(*model, prompt, o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s\n", vocab.decode(out).c_str());
    std::fprintf(stderr, "generate: %lld tokens in %.2f s (%.0f tokens/s, %s)\n", static_cast<long long>(a.tokens), s,
                 static_cast<double>(a.tokens) / std::max(s, 1e-9), o.use_cache ? "kv cache" : "no cache");
    if (a.compare) {
      o.use_cache = !o.use_cache;
      const auto t1 = std::chrono::steady_clock::now();
      const std::vector<int64_t> other = nn::generate(*model, prompt, o);
      const double s2 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      size_t same = 0;
      while (same < out.size() && same < other.size() && out[same] == other[same]) ++same;
      std::printf("compare: %s with and without the kv cache (%zu of %zu tokens agree); %.2f s vs %.2f s\n",
                  same == out.size() && out.size() == other.size() ? "identical" : "DIFFERENT", same, out.size(), s, s2);
      TESSERA_CHECK(same == out.size() && out.size() == other.size(), "generate", "tokens with and without the kv cache differ at ", same);
    }
  });
}

}  // namespace tessera::tools
