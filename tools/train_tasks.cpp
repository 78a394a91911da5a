#include "train_tasks.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "tessera/nn/amp.h"
#include "tessera/nn/language_model.h"
#include "tessera/nn/lm_checkpoint.h"
#include "tessera/nn/models.h"
#include "tessera/nn/text_data.h"
#ifdef TESSERA_HAS_ONNX
#include "tessera/onnx.h"
#endif

namespace tessera::tools {
namespace {
// Rank r of w keeps images r, r + w, ...: equal shards (the remainder is dropped) so every rank
// runs the same number of steps, each rank shuffling its own shard per epoch.
nn::ImageSet shard(const nn::ImageSet& set, int rank, int world) {
  const int64_t per_rank = set.size() / world;
  const Tensor idx =
      add(mul(arange(0.0, static_cast<double>(per_rank), 1.0, DType::f64, kCPU), static_cast<double>(world)), rank).to(DType::i64);
  return {index_select(set.images, 0, idx), index_select(set.labels, 0, idx)};
}

// --export for the image models: the file is checked by re-importing it and predicting the test
// set with both.
void export_image_model(nn::Module& model, nn::BatchSource& test, const TrainArgs& a, Device device) {
#ifdef TESSERA_HAS_ONNX
  onnx::export_model(model, zeros({1, 1, 28, 28}, DType::f32, device), a.export_onnx);
  const onnx::Model reimported = onnx::Model::load(a.export_onnx);
  NoGradGuard no_grad;
  model.eval();
  int64_t same = 0, total = 0;
  test.start_epoch(0);
  nn::Batch b;
  while (test.next(b)) {
    const Tensor ours = argmax(model.forward(b.x), 1).to(kCPU), theirs = argmax(reimported.run({b.x}, device)[0], 1).to(kCPU);
    same += sum(eq(ours, theirs)).item<int64_t>();
    total += b.x.size(0);
  }
  std::printf("exported %s to %s (ONNX opset 17); re-imported, %lld of %lld test predictions identical\n", a.model.c_str(),
              a.export_onnx.c_str(), static_cast<long long>(same), static_cast<long long>(total));
  TESSERA_CHECK(same == total, "train", "--export: the re-imported model disagrees on ", total - same, " test images");
#else
  (void)model, (void)test, (void)a, (void)device;
#endif
}

// --export for the gpt: the file is checked by re-importing it and predicting the next character
// at every position of validation windows with both.
void export_language_model(nn::Module& model, const nn::TextCorpus& corpus, const TrainArgs& a, Device device) {
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
  std::printf(
      "exported %s to %s (ONNX opset 17, variable batch and sequence); re-imported, %lld of %lld next-character predictions identical, "
      "max logit difference %.2g\n",
      a.model.c_str(), a.export_onnx.c_str(), static_cast<long long>(same), static_cast<long long>(total), diff);
  TESSERA_CHECK(same == total, "train", "--export: the re-imported model disagrees on ", total - same, " of ", total, " positions");
#else
  (void)model, (void)corpus, (void)a, (void)device;
#endif
}
}  // namespace

TrainTask make_image_task(const TrainArgs& a, const RunContext& run) {
  TrainTask t;
  auto train_set = std::make_shared<nn::ImageSet>(nn::load_mnist_split(a.data, "train", a.limit));
  if (run.group) *train_set = shard(*train_set, run.data_rank, run.data_world);
  auto test_set = std::make_shared<nn::ImageSet>(nn::load_mnist_split(a.data, "test", a.test_limit));
  const DType precision = nn::parse_precision(a.precision);
  const nn::Placement place{nn::parse_precision(a.param_dtype), run.device};
  const Device device = run.device;
  t.make_model = [model = a.model, place]() -> std::shared_ptr<nn::Module> {
    if (model == "mlp") return nn::make_mlp(place);
    return nn::make_cnn(place);
  };
  nn::LoaderOptions lo;
  lo.device = device;
  lo.workers = a.workers;
  lo.seed = static_cast<uint64_t>(a.seed) + static_cast<uint64_t>(run.data_rank);
  t.max_batch = train_set->size();
  t.trial.loss = [precision, device](nn::Module& m, int64_t b) {
    const AutocastGuard autocast(precision == DType::f32 ? DType::bf16 : precision, precision != DType::f32);
    return cross_entropy(m.forward(rand({b, 1, 28, 28}, DType::f32, device)), randint(0, 10, {b}, DType::i64, device));
  };
  t.trial.in_flight = [prefetch = lo.prefetch, device](int64_t b) {  // the loader's queue, the batch in use and one being made
    std::vector<Tensor> held;
    for (int i = 0; i < prefetch + 2; ++i) held.push_back(empty({b, 1, 28, 28}, DType::f32, device));
    return held;
  };
  t.make_data = [train_set, test_set, lo, augment = a.augment, on_device = a.preprocess == "device", capped = a.memory_limit > 0,
                 batch_given = a.batch_size != kAutoBatch](int64_t rank_batch) mutable {
    lo.batch_size = rank_batch;
    // Crop pads with 0 (the background) before normalising; the test set is only normalised.
    const nn::Transform normalize = nn::normalize({0.2860}, {0.3530});  // Fashion-MNIST statistics
    std::vector<nn::Transform> prep;
    if (augment) prep = {nn::random_crop(28, 2), nn::random_horizontal_flip(0.5)};
    prep.push_back(normalize);
    (on_device ? lo.device_transforms : lo.transforms) = prep;
    auto train = std::make_unique<nn::DataLoader>(std::move(*train_set), lo);
    TESSERA_CHECK(train->batches() > 0, "train", "no training batches: ", train->samples(), " images with --batch-size ", rank_batch);
    lo.shuffle = false;
    (on_device ? lo.device_transforms : lo.transforms) = {normalize};
    // Evaluation keeps no activations for backward: a batch no larger than training's fits where it does.
    lo.batch_size = batch_given && !capped ? 1000 : std::min<int64_t>(1000, rank_batch);
    return std::pair<std::unique_ptr<nn::BatchSource>, std::unique_ptr<nn::BatchSource>>{
        std::move(train), std::make_unique<nn::DataLoader>(std::move(*test_set), lo)};
  };
  t.epochs = a.epochs;
  t.steps_of_epoch = [accumulation = a.grad_accumulation](const nn::BatchSource& train) {
    return (train.batches() + accumulation - 1) / accumulation;
  };
  t.describe = [samples = train_set->size(), world = run.data_world, device](const nn::Module& model, const TrainArgs& a) {
    return detail::concat("training ", a.model, " (", model.num_parameters(), " parameters) on ", device.str(), ": ", samples * world,
                          " images, ", a.epochs, " epochs, batch ", a.batch_size, ", ", a.optimizer, " lr ", a.lr, " (", a.schedule,
                          "), precision ", a.precision, a.param_dtype == "f32" ? "" : " (16-bit parameters, f32 optimizer state)");
  };
  t.print_epoch = [](const nn::EpochStats& s, const TrainArgs& a) {
    std::printf("epoch %lld/%lld  train_loss %.4f  test_loss %.4f  test_acc %.2f%%  %.0f samples/s  step %.1f ms  (%.1f s)\n",
                static_cast<long long>(s.epoch), static_cast<long long>(a.epochs), s.train_loss, s.test.loss, 100.0 * s.test.accuracy,
                s.samples_per_second, s.step_ms, s.seconds);
  };
  t.print_result = [device](const nn::EvalStats& final_eval, double seconds, double, const TrainArgs& a, int world) {
    std::printf("result: %s on %s%s, test accuracy %.2f%%, test loss %.4f, %.1f s\n", a.model.c_str(), device.str().c_str(),
                world > 1 ? (" x " + std::to_string(world) + " ranks").c_str() : "", 100.0 * final_eval.accuracy, final_eval.loss, seconds);
  };
  t.report = [](nlohmann::json& j, const nn::EvalStats& final_eval, double throughput, const TrainArgs& a) {
    j["epochs"] = a.epochs;
    j["test_accuracy"] = final_eval.accuracy;
    j["test_loss"] = final_eval.loss;
    j["samples_per_second"] = throughput;
  };
  t.export_check = [device](nn::Module& m, nn::BatchSource& test, const TrainArgs& args) { export_image_model(m, test, args, device); };
  return t;
}

TrainTask make_text_task(const TrainArgs& a, const RunContext& run) {
  TrainTask t;
  auto corpus = std::make_shared<nn::TextCorpus>(nn::load_text_corpus(a.data));
  TESSERA_CHECK(static_cast<int64_t>(corpus->val.size()) > a.context + 1, "train", "the validation split of '", a.data, "' (",
                corpus->val.size(), " characters) is shorter than --context ", a.context, " + 1");
  const DType precision = nn::parse_precision(a.precision);
  const nn::Placement place{nn::parse_precision(a.param_dtype), run.device};
  const Device device = run.device;
  const int64_t vocab = corpus->vocab.size();
  t.model_config = {{"model", a.model}, {"layers", a.layers}, {"dim", a.dim}};
  if (a.model == "gpt") {
    t.model_config["heads"] = a.heads;
    t.model_config["context"] = a.context;
  }
  const auto build = [a, vocab](nn::Placement p) -> std::shared_ptr<nn::Module> {
    if (a.model == "gpt") return std::make_shared<nn::GPT>(nn::GPTConfig{vocab, a.context, a.layers, a.heads, a.dim, a.dropout}, p);
    return std::make_shared<nn::CharLSTM>(nn::CharLSTMConfig{vocab, a.dim, a.layers}, p);
  };
  t.make_model = [build, place] { return build(place); };
  t.make_host_model = [build, place] { return build(nn::Placement{place.dtype, kCPU}); };
  if (a.model == "gpt") {
    t.make_host_stage = [a, vocab, place](int64_t stages, int64_t chunks, int64_t stage) -> std::shared_ptr<nn::Module> {
      std::vector<nn::GPTBlockRange> blocks;  // chunk c is virtual stage c x stages + stage
      for (int64_t c = 0; c < chunks; ++c) blocks.push_back(nn::gpt_stage_blocks(a.layers, stages * chunks, c * stages + stage));
      return std::make_shared<nn::GPT>(nn::GPTConfig{vocab, a.context, a.layers, a.heads, a.dim, a.dropout},
                                       nn::Placement{place.dtype, kCPU}, blocks);
    };
  }
  t.max_batch = int64_t{1} << 14;
  t.trial.loss = [precision, device, vocab, context = a.context](nn::Module& m, int64_t b) {
    const Tensor x = randint(0, vocab, {b, context}, DType::i64, device);
    const AutocastGuard autocast(precision == DType::f32 ? DType::bf16 : precision, precision != DType::f32);
    return nn::next_token_loss(m.forward(x), x);
  };
  t.trial.in_flight = [device, context = a.context](int64_t b) {
    return std::vector<Tensor>{empty({b, context}, DType::i64, device), empty({b, context}, DType::i64, device)};
  };
  // One Trainer epoch is --eval-every optimizer steps: validation, then the checkpoint.
  const int64_t accumulation = a.grad_accumulation;
  t.make_data = [corpus, a, device, rank = run.data_rank, world = run.data_world, accumulation](int64_t rank_batch) {
    nn::WindowOptions train;
    train.batch = rank_batch;
    train.context = a.context;
    train.batches_per_epoch = a.eval_every * accumulation;
    train.total_batches = a.steps * accumulation;
    train.seed = static_cast<uint64_t>(a.seed) + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank);  // each rank its own windows
    train.device = device;
    // Validation: the same 16 batches of the global batch every time, on every rank.
    nn::WindowOptions val = train;
    val.batch = rank_batch * world;
    val.batches_per_epoch = 16;
    val.total_batches = -1;
    val.seed = 1234;
    val.same_every_epoch = true;
    return std::pair<std::unique_ptr<nn::BatchSource>, std::unique_ptr<nn::BatchSource>>{
        std::make_unique<nn::WindowSource>(corpus->train, train), std::make_unique<nn::WindowSource>(corpus->val, val)};
  };
  t.loss = nn::next_token_loss;
  t.epochs = (a.steps + a.eval_every - 1) / a.eval_every;
  t.steps_of_epoch = [accumulation](const nn::BatchSource& train) { return (train.batches() + accumulation - 1) / accumulation; };
  t.total_steps = a.steps;
  t.min_lr_factor = 0.1;
  t.parameter_groups = true;
  t.unit = "tokens";
  t.targets_per_sample = a.context;
  t.checkpoint_metadata = nn::language_model_metadata(t.model_config.dump(), corpus->vocab);
  t.describe = [corpus, device](const nn::Module& model, const TrainArgs& a) {
    const auto* gpt = dynamic_cast<const nn::GPT*>(&model);  // a pipeline stage's part counts the whole
    return detail::concat("training ", a.model, " (", gpt ? gpt->whole_num_parameters() : model.num_parameters(), " parameters) on ",
                          device.str(), ": ", corpus->source, ", ", corpus->bytes, " characters (vocab ", corpus->vocab.size(), "), ",
                          a.steps, " steps x ", a.batch_size * a.grad_accumulation, " x ", a.context, " tokens, ", a.optimizer, " lr ",
                          a.lr, " wd ", a.weight_decay, ", precision ", a.precision);
  };
  t.print_epoch = [start = std::chrono::steady_clock::now()](const nn::EpochStats& s, const TrainArgs& a) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("step %lld/%lld  train_loss %.4f  val_loss %.4f nats/char  lr %.2e  %.0f tokens/s  (%.1f s)\n",
                static_cast<long long>(s.step), static_cast<long long>(a.steps), s.train_loss, s.test.loss, s.lr, s.samples_per_second,
                seconds);
  };
  t.print_result = [device](const nn::EvalStats& final_eval, double seconds, double throughput, const TrainArgs& a, int) {
    std::printf("result: %s on %s, validation loss %.4f nats/char, %.0f tokens/s, %.1f s\n", a.model.c_str(), device.str().c_str(),
                final_eval.loss, throughput, seconds);
  };
  t.report = [config = t.model_config](nlohmann::json& j, const nn::EvalStats& final_eval, double throughput, const TrainArgs& a) {
    j["model_config"] = config;
    j["steps"] = a.steps;
    j["batch"] = a.batch_size;
    j["context"] = a.context;
    j["lr"] = a.lr;
    j["val_loss"] = final_eval.loss;
    j["tokens_per_second"] = throughput;
  };
  t.report_epoch = [](nlohmann::json& e, const nn::EpochStats& h) {  // the language-model names of the same figures
    e["val_loss"] = h.test.loss;
    e["tokens_per_second"] = h.samples_per_second;
  };
  t.progress_bar = false;
  t.export_check = [corpus, device](nn::Module& m, nn::BatchSource&, const TrainArgs& args) {
    export_language_model(m, *corpus, args, device);
  };
  return t;
}

}  // namespace tessera::tools
