// `tessera train`: trains the MLP or the CNN on Fashion-MNIST (or MNIST) on any backend; the
// language models go to train_lm.cpp.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <thread>
#include <memory>
#include <nlohmann/json.hpp>

#include "batch_auto.h"
#include "commands.h"
#include "metrics_log.h"
#include "tessera/nn/file_io.h"
#include "train_args.h"
#include "tessera/dist.h"
#include "tessera/nn/ddp.h"
#include "tessera/nn/models.h"
#include "tessera/nn/trainer.h"
#include "tessera/profiler.h"
#ifdef TESSERA_HAS_ONNX
#include "tessera/onnx.h"
#endif

namespace tessera::tools {
namespace {
// Rank r of w keeps images r, r + w, ...: equal shards (the remainder is dropped) so every rank
// runs the same number of steps, each rank shuffling its own shard per epoch.
nn::ImageSet shard(const nn::ImageSet& set, int rank, int world) {
  const int64_t per_rank = set.size() / world;
  const Tensor idx = add(mul(arange(0.0, static_cast<double>(per_rank), 1.0, DType::f64, kCPU), static_cast<double>(world)), rank).to(DType::i64);
  return {index_select(set.images, 0, idx), index_select(set.labels, 0, idx)};
}
}  // namespace

Device pick_device(const std::string& backend) {
  if (backend != "auto") {
    const Device d = Device::parse(backend);
    backend_for_device(d, "train");  // throws with the reason when unavailable
    return d;
  }
  // Best available: GPUs first, then a Kokkos built for a GPU, then the CPU backend (a
  // host-memory Kokkos such as Serial or OpenMP is slower than it; the emulator is never
  // automatic).
  for (DeviceType t : {DeviceType::cuda, DeviceType::hip, DeviceType::kokkos}) {
    Backend* b = find_backend(t);
    if (!b || b->device_count() == 0 || (t == DeviceType::kokkos && b->host_accessible())) continue;
    return Device(t, 0);
  }
  return kCPU;
}

namespace {

void run_train(TrainArgs& a, const CLI::App& cmd) {
  validate_train_args(a, [&](const std::string& flag) { return cmd.count(flag) > 0; });
  if (is_language_model(a.model)) {
    run_train_lm(a, [&](const std::string& flag) { return cmd.count(flag) > 0; }, pick_device(a.backend));
    return;
  }
  std::vector<std::string> resume_report;
  if (a.resume && std::filesystem::exists(a.checkpoint)) {
    const nn::Metadata meta = nn::read_safetensors_metadata(a.checkpoint);
    const auto config = meta.find("config");
    TESSERA_CHECK(config != meta.end(), "train", "'", a.checkpoint, "' is not a Tessera checkpoint (no run settings)");
    // --batch-size auto on resume keeps the checkpoint's batch (the run it continues searched it).
    resume_report = reconcile_resume(a, config->second, [&](const std::string& flag) {
      return cmd.count(flag) > 0 && !(flag == "--batch-size" && a.batch_size == kAutoBatch);
    });
    for (const std::string& line : resume_report) std::fprintf(stderr, "resume: %s\n", line.c_str());
  }
  std::shared_ptr<dist::ProcessGroup> group;
  if (a.distributed) {
    group = dist::init_process_group();
    TESSERA_CHECK(a.batch_size % group->world_size() == 0, "train", "--batch ", a.batch_size, " (the global batch) must divide by the ",
                  group->world_size(), " ranks");
  }
  const int rank = group ? group->rank() : 0, world = group ? group->world_size() : 1;
  // Ranks share the node's cores unless told otherwise.
  set_num_threads(a.threads == 0 && world > 1 ? std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world) : a.threads);
  Device device = pick_device(a.backend);
  if (group && device.type != DeviceType::cpu) device = Device(device.type, a.local_rank >= 0 ? a.local_rank : group->local_rank());
  if (rank != 0) a.quiet = true;  // rank 0 logs
  if (a.memory_limit > 0) set_memory_limit(device, a.memory_limit);
  nn::ImageSet train_set = nn::load_mnist_split(a.data, "train", a.limit);
  if (group) train_set = shard(train_set, rank, world);
  nn::ImageSet test_set = nn::load_mnist_split(a.data, "test", a.test_limit);
  const DType precision = nn::parse_precision(a.precision), param_dtype = nn::parse_precision(a.param_dtype);
  TESSERA_CHECK(param_dtype == DType::f32 || param_dtype == precision, "train", "--param-dtype ", a.param_dtype,
                " needs --precision ", a.param_dtype, " (16-bit parameters only run under autocast)");
  const nn::Placement place{param_dtype, device};
  const auto make_model = [&] { return a.model == "mlp" ? nn::make_mlp(place) : nn::make_cnn(place); };
  nn::OptimOptions opts;
  opts.lr = a.lr;
  opts.weight_decay = a.weight_decay;
  if (a.optimizer == "sgd") opts.momentum = 0.9;
  nn::LoaderOptions lo;
  nlohmann::json batch_report;
  if (a.batch_size == kAutoBatch) {
    BatchTrialModel trial;
    trial.make_model = [&]() -> std::shared_ptr<nn::Module> { return make_model(); };
    trial.make_optimizer = [&](nn::Module& m) { return nn::make_optimizer(a.optimizer, m.parameters(), opts); };
    trial.loss = [&](nn::Module& m, int64_t b) {
      const AutocastGuard autocast(precision == DType::f32 ? DType::bf16 : precision, precision != DType::f32);
      return cross_entropy(m.forward(rand({b, 1, 28, 28}, DType::f32, device)), randint(0, 10, {b}, DType::i64, device));
    };
    trial.in_flight = [&](int64_t b) {  // the loader's prefetch queue, the batch in use and one being made
      std::vector<Tensor> held;
      for (int i = 0; i < lo.prefetch + 2; ++i) held.push_back(empty({b, 1, 28, 28}, DType::f32, device));
      return held;
    };
    a.batch_size = auto_batch_size(trial, device, train_set.size(), group.get(), a.quiet, batch_report) * world;
  }
  manual_seed(static_cast<uint64_t>(a.seed));  // after the search, which draws from the generator
  std::shared_ptr<nn::Sequential> model = make_model();
  auto optimizer = nn::make_optimizer(a.optimizer, model->parameters(), opts);

  std::unique_ptr<nn::DistributedDataParallel> ddp;
  if (group) ddp = std::make_unique<nn::DistributedDataParallel>(model, *group);  // rank 0's initial weights everywhere
  lo.batch_size = a.batch_size / world;
  lo.seed = static_cast<uint64_t>(a.seed) + static_cast<uint64_t>(rank);
  lo.device = device;
  lo.workers = a.workers;
  // Crop pads with 0 (the background) before normalising; the test set is only normalised.
  const nn::Transform normalize = nn::normalize({0.2860}, {0.3530});  // Fashion-MNIST statistics
  std::vector<nn::Transform> prep;
  if (a.augment) prep = {nn::random_crop(28, 2), nn::random_horizontal_flip(0.5)};
  prep.push_back(normalize);
  (a.preprocess == "device" ? lo.device_transforms : lo.transforms) = prep;
  nn::DataLoader train(std::move(train_set), lo);
  TESSERA_CHECK(train.batches() > 0, "train", "no training batches: ", train.samples(), " images with --batch-size ", a.batch_size);
  lo.shuffle = false;
  (a.preprocess == "device" ? lo.device_transforms : lo.transforms) = {normalize};
  // Evaluation keeps no activations for backward: a batch no larger than training's fits where it does.
  lo.batch_size = batch_report.is_null() && a.memory_limit == 0 ? 1000 : std::min<int64_t>(1000, lo.batch_size);
  nn::DataLoader test(std::move(test_set), lo);

  std::unique_ptr<nn::Scheduler> scheduler;
  if (a.schedule == "cosine") {
    scheduler = std::make_unique<nn::Scheduler>(*optimizer, std::make_shared<nn::CosineLR>(a.epochs * train.batches()));
  }
  const nlohmann::json config = nlohmann::json::parse(train_config_json(a));
  if (!a.quiet) {
    std::printf("training %s (%lld parameters) on %s: %lld images, %lld epochs, batch %lld, %s lr %g (%s), precision %s%s\n",
                a.model.c_str(), static_cast<long long>(model->num_parameters()), device.str().c_str(),
                static_cast<long long>(train.samples()), static_cast<long long>(a.epochs), static_cast<long long>(a.batch_size),
                a.optimizer.c_str(), a.lr, a.schedule.c_str(), a.precision.c_str(),
                param_dtype == DType::f32 ? "" : " (16-bit parameters, f32 optimizer state)");
  }
  nn::TrainOptions to;
  to.epochs = a.epochs;
  to.checkpoint = a.checkpoint;
  to.resume = a.resume;
  to.config = config.dump();
  to.progress = !a.quiet && isatty(STDERR_FILENO);
  to.precision = precision;
  to.graph = a.graph;
  to.on_nonfinite = a.on_nonfinite == "skip" ? nn::OnNonFinite::skip : nn::OnNonFinite::stop;
  to.detect_anomaly = a.detect_anomaly;
  to.reset_optimizer = a.reset_optimizer;
  to.resume_lr = a.lr;
  to.ddp = ddp.get();
  if (group && !a.quiet) std::printf("data parallel: %d ranks over %s, %lld images and batch %lld per rank\n", world, group->backend().c_str(),
                                     static_cast<long long>(train.samples()), static_cast<long long>(a.batch_size / world));
  if (a.graph && !DeviceGraph::supported(device) && !a.quiet) {
    std::printf("--graph: %s cannot capture graphs; running eagerly\n", device.str().c_str());
  }
  // f16 gradients underflow without loss scaling; bf16 has f32's exponent range and needs none.
  nn::GradScaler scaler(nn::GradScalerOptions{.enabled = precision == DType::f16});
  if (scaler.enabled()) to.scaler = &scaler;
  int64_t epoch_now = 1;  // for --metrics
  to.on_epoch_end = [&](const nn::EpochStats& s) {
    epoch_now = s.epoch + 1;
    if (a.quiet) return;
    std::printf("epoch %lld/%lld  train_loss %.4f  test_loss %.4f  test_acc %.2f%%  %.0f samples/s  step %.1f ms  (%.1f s)\n",
                static_cast<long long>(s.epoch), static_cast<long long>(a.epochs), s.train_loss, s.test.loss,
                100.0 * s.test.accuracy, s.samples_per_second, s.step_ms, s.seconds);
    std::fflush(stdout);
  };
  std::vector<double> step_losses;
  MetricsLog metrics(rank == 0 ? a.metrics : std::string());
  // The learning rate a step used: on_step_end runs after the scheduler moved it on.
  double step_lr = optimizer->param_groups().front().options.lr;
  to.on_step_end = [&](int64_t step, double loss) {
    step_losses.push_back(loss);
    metrics.step(step, epoch_now, loss, step_lr, a.batch_size, "samples", device);
    step_lr = optimizer->param_groups().front().options.lr;
  };
  nn::Trainer trainer(*model, *optimizer, scheduler.get());
  const auto t0 = std::chrono::steady_clock::now();
  const auto history = trainer.fit(train, &test, to);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const nn::EvalStats final_eval = history.empty() ? trainer.evaluate(test) : history.back().test;
  double sps = 0;
  for (const auto& h : history) sps += h.samples_per_second / static_cast<double>(history.size());
  if (rank != 0) return;  // every rank evaluated the same test set; rank 0 reports
  if (!a.export_onnx.empty()) {
#ifdef TESSERA_HAS_ONNX
    onnx::export_model(*model, zeros({1, 1, 28, 28}, DType::f32, device), a.export_onnx);
    // The file is checked by re-importing it and predicting the test set with both.
    const onnx::Model reimported = onnx::Model::load(a.export_onnx);
    NoGradGuard no_grad;
    model->eval();
    int64_t same = 0, total = 0;
    test.start_epoch(0);
    nn::Batch b;
    while (test.next(b)) {
      const Tensor ours = argmax(model->forward(b.x), 1).to(kCPU), theirs = argmax(reimported.run({b.x}, device)[0], 1).to(kCPU);
      same += sum(eq(ours, theirs)).item<int64_t>();
      total += b.x.size(0);
    }
    std::printf("exported %s to %s (ONNX opset 17); re-imported, %lld of %lld test predictions identical\n", a.model.c_str(),
                a.export_onnx.c_str(), static_cast<long long>(same), static_cast<long long>(total));
    TESSERA_CHECK(same == total, "train", "--export: the re-imported model disagrees on ", total - same, " test images");
#endif
  }
  std::printf("result: %s on %s%s, test accuracy %.2f%%, test loss %.4f, %.1f s\n", a.model.c_str(), device.str().c_str(),
              world > 1 ? (" x " + std::to_string(world) + " ranks").c_str() : "", 100.0 * final_eval.accuracy, final_eval.loss, seconds);
  if (!a.json.empty()) {
    nlohmann::json j = {{"backend", device.str()}, {"model", a.model}, {"precision", a.precision},          {"epochs", a.epochs},
                        {"test_accuracy", final_eval.accuracy}, {"test_loss", final_eval.loss},
                        {"samples_per_second", sps}, {"seconds", seconds}, {"config", config},
                        {"step_losses", step_losses}};
    if (scaler.enabled()) j["loss_scaling"] = {{"final_scale", scaler.get_scale()}, {"skipped_steps", scaler.skipped_steps()}};
    for (const auto& h : history) {
      j["history"].push_back({{"epoch", h.epoch}, {"train_loss", h.train_loss}, {"test_loss", h.test.loss},
                              {"test_accuracy", h.test.accuracy}, {"samples_per_second", h.samples_per_second},
                              {"step_ms", h.step_ms}, {"seconds", h.seconds}, {"graph_replays", h.graph_replays},
                              {"skipped_steps", h.skipped_steps}});
    }
    if (!resume_report.empty()) j["resume_overrides"] = resume_report;
    if (!batch_report.is_null()) j["batch_search"] = batch_report;
    nn::write_file_atomic(a.json, j.dump(2) + "\n", "train --json");
  }
}

// The run, under a profile when --profile names a trace file.
void run_train_profiled(TrainArgs& a, const CLI::App& cmd) {
  if (a.profile.empty()) return run_train(a, cmd);
  profile::start();
  try {
    run_train(a, cmd);
  } catch (...) {
    (void)profile::stop();  // the error is the news, not a half trace
    throw;
  }
  const profile::Trace trace = profile::stop();
  trace.write_chrome_json(a.profile);
  if (!a.quiet) std::printf("profile: %zu spans on %zu tracks written to %s\n%s", trace.spans.size(), trace.tracks.size(), a.profile.c_str(),
                            trace.summary_table().c_str());
}

bool g_parse_only = false;
}  // namespace

void set_parse_only(bool on) { g_parse_only = on; }

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a model: mlp/cnn on Fashion-MNIST, gpt/lstm on text");
  static TrainArgs a;
  a = TrainArgs{};
  add_train_options(*cmd, a);
  cmd->callback([cmd] {
    if (g_parse_only) {
      validate_train_args(a, [&](const std::string& flag) { return cmd->count(flag) > 0; });
      return;
    }
    if (a.deterministic) set_deterministic(true);
    if (const char* plant = std::getenv("TESSERA_PLANT_WRONG_KERNEL"); plant && *plant) {
      plant_wrong_kernel(plant);  // the cross-check's own test
      std::printf("WARNING: TESSERA_PLANT_WRONG_KERNEL=%s: that kernel's outputs are 1%% off\n", plant);
    }
    if (!a.check_against.empty()) {
      set_check_against_cpu(true);
      run_train_profiled(a, *cmd);
      const auto first = first_divergence();
      std::printf("check-against cpu: %lld kernels compared with the cpu backend, %lld diverged%s%s\n",
                  static_cast<long long>(cross_checked_kernels()), static_cast<long long>(divergent_kernels()), first ? "; first: " : "",
                  first ? first->text().c_str() : "");
      set_check_against_cpu(false);
      TESSERA_CHECK(!first, "train", "--check-against cpu: ", first ? first->text() : "");
      return;
    }
    run_train_profiled(a, *cmd);
  });
}

}  // namespace tessera::tools
