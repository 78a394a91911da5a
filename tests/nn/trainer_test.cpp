// The Trainer learns a synthetic problem, and a run resumed from a checkpoint ends with
// bit-identical weights to an uninterrupted run.
#include <filesystem>

#include "support/checks.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/models.h"
#include "tessera/nn/trainer.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;

namespace {
// Two Gaussian blobs per class in 2-D, as 1x1x2 "images".
ImageSet blobs(int64_t n, uint64_t seed) {
  Generator g(seed);
  ImageSet s;
  s.labels = randint(0, 3, {n}, DType::i64, kCPU, &g);
  const Tensor centers = from_vector<float>({-2, 0, 2, 2, 0, -2}, {3, 2});
  s.images = add(index_select(centers, 0, s.labels), mul(randn({n, 2}, DType::f32, kCPU, &g), 0.5)).reshape({n, 1, 1, 2});
  return s;
}

std::shared_ptr<Sequential> small_model() {
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Flatten>(), std::make_shared<Linear>(2, 16, true, Placement{DType::f32, device()}),
      std::make_shared<ReLU>(), std::make_shared<Linear>(16, 3, true, Placement{DType::f32, device()})});
}

StateDict train_run(int64_t epochs, const std::string& checkpoint, bool resume, int64_t stop_after = -1) {
  manual_seed(7);
  auto model = small_model();
  Adam opt(model->parameters(), OptimOptions{});
  Scheduler sched(opt, std::make_shared<CosineLR>(epochs * 8));
  LoaderOptions lo;
  lo.batch_size = 32;
  lo.seed = 11;
  lo.device = device();
  DataLoader train(blobs(256, 1), lo);
  Trainer trainer(*model, opt, &sched);
  TrainOptions to;
  to.epochs = stop_after > 0 ? stop_after : epochs;
  to.checkpoint = checkpoint;
  to.resume = resume;
  trainer.fit(train, nullptr, to);
  return model->state_dict();
}
}  // namespace

TEST_CASE("the trainer learns and evaluates a separable problem") {
  manual_seed(3);
  auto model = small_model();
  Adam opt(model->parameters(), OptimOptions{.lr = 0.02});
  LoaderOptions lo;
  lo.batch_size = 64;
  lo.device = device();
  DataLoader train(blobs(512, 2), lo), test(blobs(256, 3), lo);
  Trainer trainer(*model, opt);
  TrainOptions to;
  to.epochs = 8;
  to.grad_accumulation = 2;
  to.clip_norm = 5.0;
  int64_t calls = 0;
  to.on_epoch_end = [&](const EpochStats& s) {
    ++calls;
    CHECK(s.samples_per_second > 0);
  };
  const auto history = trainer.fit(train, &test, to);
  CHECK(calls == 8);
  CHECK(history.back().train_loss < history.front().train_loss);
  CHECK(history.back().test.accuracy > 0.95);
  CHECK(trainer.evaluate(test).samples == 256);
}

TEST_CASE("resuming from a checkpoint gives bit-identical weights") {
  const std::string dir = std::filesystem::temp_directory_path() / ("tessera_resume_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const StateDict straight = train_run(4, dir + "/a.safetensors", false);
  train_run(4, dir + "/b.safetensors", false, 2);  // "interrupted" after two epochs
  const StateDict resumed = train_run(4, dir + "/b.safetensors", true);
  for (const auto& [k, t] : straight) {
    CAPTURE(k);
    TESSERA_CHECK_CLOSE(resumed.at(k), to_ref(t), Tolerance{0, 0});
  }
  std::filesystem::remove_all(dir);
  auto probe = small_model();
  SGD probe_opt(probe->parameters(), OptimOptions{});
  TESSERA_CHECK_THROWS_WITH(Trainer(*probe, probe_opt).load_checkpoint("/nonexistent.safetensors"), "load_safetensors: cannot open");
}

TEST_CASE("a CNN training step makes no host sync besides reading the loss") {
  manual_seed(5);
  auto model = make_cnn(Placement{DType::f32, device()});
  Adam opt(model->parameters(), OptimOptions{});
  const Tensor images = randn({8, 1, 28, 28}, DType::f32, kCPU).to(device());
  const Tensor labels = randint(0, 10, {8}, DType::i64, kCPU).to(device());
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(images), labels);
    loss.backward();
    opt.step();
    return loss.item<float>();
  };
  const float first = step();  // warm-up: allocator caches, lazily created state
  reset_host_sync_stats();
  const float second = step();
  const HostSyncStats stats = host_sync_stats();
  std::string where;
  for (const auto& [op, n] : stats.by_op) where += op + ":" + std::to_string(n) + " ";
  CAPTURE(where);
  // Device backends count each wait of the host; the one allowed is loss.item().
  if (device().type == DeviceType::emulated) CHECK(stats.total == 1);
  CHECK(stats.total <= 1);
  CHECK(std::isfinite(first));
  CHECK(std::isfinite(second));
}

namespace {
// A custom loop (no Trainer): random batches from the default generator, dropout, Adam with a
// cosine schedule. Runs steps [first, last); saves after step `save_at` when given.
StateDict custom_loop(int64_t first, int64_t last, const std::string& path, int64_t save_at, bool resume) {
  manual_seed(resume ? 99 : 3);  // a resumed run must take everything from the file
  auto model = std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<Linear>(4, 8, true, Placement{DType::f32, device()}),
                                                                   std::make_shared<Dropout>(0.25),
                                                                   std::make_shared<Linear>(8, 3, true, Placement{DType::f32, device()})});
  Adam opt(model->parameters(), OptimOptions{.lr = 1e-2});
  Scheduler sched(opt, std::make_shared<CosineLR>(last));
  const CheckpointParts parts{model.get(), &opt, &sched, nullptr};
  if (resume) {
    const CheckpointInfo info = load_checkpoint(path, parts);
    CHECK(info.epoch == first);
    CHECK(info.step == first);
    CHECK(info.metadata.at("note") == "custom loop");
  }
  model->train();
  for (int64_t step = first; step < last; ++step) {
    const Tensor x = randn({16, 4}, DType::f32, device());
    const Tensor y = randint(0, 3, {16}, DType::i64, device());
    opt.zero_grad();
    cross_entropy(model->forward(x), y).backward();
    opt.step();
    sched.step();
    if (step + 1 == save_at) save_checkpoint(path, parts, save_at, Metadata{{"note", "custom loop"}});
  }
  return model->state_dict();
}
}  // namespace

TEST_CASE("save_checkpoint/load_checkpoint: a custom loop saved at step N and resumed equals the unbroken loop bit for bit") {
  const std::string path = (std::filesystem::temp_directory_path() / ("tessera_custom_loop_" + device().str() + ".safetensors")).string();
  const StateDict unbroken = custom_loop(0, 12, path, 5, false);
  const StateDict resumed = custom_loop(5, 12, path, -1, true);
  REQUIRE(unbroken.size() == resumed.size());
  for (const auto& [k, t] : unbroken) {
    CAPTURE(k);
    CHECK(t.to(kCPU).to_vector<float>() == resumed.at(k).to(kCPU).to_vector<float>());
  }
  // The Trainer's own files are this format: a model-only part list reads them too.
  auto probe = std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<Linear>(4, 8, true, Placement{DType::f32, device()}),
                                                                   std::make_shared<Dropout>(0.25),
                                                                   std::make_shared<Linear>(8, 3, true, Placement{DType::f32, device()})});
  CHECK(load_checkpoint(path, CheckpointParts{probe.get()}).epoch == 5);
  TESSERA_CHECK_THROWS_WITH(save_checkpoint(path, CheckpointParts{}, 1), "no model given");
  std::filesystem::remove(path);
}
