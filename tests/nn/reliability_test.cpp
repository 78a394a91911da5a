// Hostile files and failing runs: crafted safetensors and IDX headers, gzip bombs, FIFOs,
// out-of-range labels and corrupt checkpoints are clear errors; a NaN loss stops a run (or
// skips the step) and never reaches a checkpoint; resuming refuses a different optimizer.
#include <sys/stat.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "support/checks.h"
#include "tessera/nn/data.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/trainer.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;
namespace fs = std::filesystem;

namespace {
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("tessera_rel_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void spit(const std::string& p, const std::string& b) { std::ofstream(p, std::ios::binary) << b; }

// An IDX file of u8 with the given dims (big-endian u32) followed by `data`.
std::string idx_bytes(const std::vector<uint32_t>& dims, const std::string& data) {
  std::string b = {0, 0, 0x08, static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<char>((d >> s) & 0xff));
  }
  return b + data;
}

void gzip_to(const std::string& path, const std::string& head, size_t zeros) {
  gzFile f = gzopen(path.c_str(), "wb9");
  REQUIRE(f != nullptr);
  gzwrite(f, head.data(), static_cast<unsigned>(head.size()));
  const std::string block(1 << 20, '\0');
  for (size_t done = 0; done < zeros; done += block.size()) gzwrite(f, block.data(), static_cast<unsigned>(std::min(block.size(), zeros - done)));
  gzclose(f);
}

std::string safetensors_with_header(const std::string& header_json, size_t data_bytes) {
  std::string h = header_json;
  const uint64_t n = h.size();
  std::string b(8, '\0');
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(n >> (8 * i));
  return b + h + std::string(data_bytes, '\0');
}

std::shared_ptr<Sequential> tiny_model() {
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Flatten>(), std::make_shared<Linear>(2, 8, true, Placement{DType::f32, device()}),
      std::make_shared<ReLU>(), std::make_shared<Linear>(8, 3, true, Placement{DType::f32, device()})});
}

ImageSet blobs(int64_t n) {
  Generator g(5);
  ImageSet s;
  s.labels = randint(0, 3, {n}, DType::i64, kCPU, &g);
  s.images = randn({n, 1, 1, 2}, DType::f32, kCPU, &g);
  return s;
}

LoaderOptions loader_options() {
  LoaderOptions lo;
  lo.batch_size = 16;
  lo.device = device();
  return lo;
}
}  // namespace

TEST_CASE("crafted safetensors shapes and IDX dimensions are rejected before any allocation") {
  const TempDir dir;
  spit(dir / "huge.safetensors",
       safetensors_with_header(R"({"w":{"dtype":"F32","shape":[4611686018427438080,4],"data_offsets":[0,16]}})", 16));
  TESSERA_CHECK_THROWS_WITH(load_safetensors(dir / "huge.safetensors"), "more than 2^63");
  spit(dir / "neg.safetensors", safetensors_with_header(R"({"w":{"dtype":"F32","shape":[-2,-2],"data_offsets":[0,16]}})", 16));
  TESSERA_CHECK_THROWS_WITH(load_safetensors(dir / "neg.safetensors"), "negative size");
  spit(dir / "bool.safetensors", safetensors_with_header(R"({"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", 0) + "\1\x76");
  TESSERA_CHECK_THROWS_WITH(load_safetensors(dir / "bool.safetensors"), "holds BOOL bytes other than 0 and 1");  // found by fuzz_safetensors
  // 2^16 x 2^16 x 2^16 x 2^16 wraps to 0 in 64 bits.
  spit(dir / "wrap.idx", idx_bytes({65536, 65536, 65536, 65536}, ""));
  TESSERA_CHECK_THROWS_WITH(read_idx(dir / "wrap.idx"), "limit");
  spit(dir / "zero.idx", idx_bytes({0, 65536}, ""));
  CHECK(read_idx(dir / "zero.idx").numel() == 0);
  spit(dir / "short.idx", idx_bytes({3, 3}, "abc"));
  TESSERA_CHECK_THROWS_WITH(read_idx(dir / "short.idx"), "is truncated: [3, 3] needs 9 bytes");
}

TEST_CASE("gzip input inflates no further than its header declares") {
  const TempDir dir;
  // A bomb: the header declares 10 bytes, the stream inflates to 64 MB of zeros.
  gzip_to(dir / "bomb.gz", idx_bytes({10}, std::string(10, '\1')), size_t{64} << 20);
  TESSERA_CHECK_THROWS_WITH(read_idx(dir / "bomb.gz"), "inflates to more than the 18 bytes its header declares");
  // A header declaring far more than deflate can encode in the file's size.
  gzip_to(dir / "liar.gz", idx_bytes({60000, 28, 28}, ""), 0);
  TESSERA_CHECK_THROWS_WITH(read_idx(dir / "liar.gz"), "more than");
  gzip_to(dir / "ok.gz", idx_bytes({4}, std::string("\1\2\3\4", 4)), 0);
  CHECK(read_idx(dir / "ok.gz").to_vector<uint8_t>() == std::vector<uint8_t>{1, 2, 3, 4});
}

TEST_CASE("a FIFO or a directory as an input file is refused instead of blocking") {
  const TempDir dir;
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  TESSERA_CHECK_THROWS_WITH(read_idx(dir / "fifo"), "is not a regular file");
  TESSERA_CHECK_THROWS_WITH(load_safetensors(dir / "fifo"), "is not a regular file");
  TESSERA_CHECK_THROWS_WITH(read_idx(dir.path.string()), "is not a regular file");
}

TEST_CASE("labels outside the 10 classes are found when the data set loads") {
  const TempDir dir;
  for (const char* split : {"train", "t10k"}) {
    spit(dir / (std::string(split) + "-images-idx3-ubyte"), idx_bytes({3, 2, 2}, std::string(12, '\0')));
    spit(dir / (std::string(split) + "-labels-idx1-ubyte"), idx_bytes({3}, std::string("\1\14\2", 3)));
  }
  TESSERA_CHECK_THROWS_WITH(load_mnist_split(dir.path.string(), "train", -1), "train label 12 at index 1 is not a class index 0-9");
}

TEST_CASE("a corrupt, poisoned or mismatched checkpoint is an error that changes nothing") {
  const TempDir dir;
  manual_seed(1);
  auto model = tiny_model();
  Adam adam(model->parameters(), OptimOptions{});
  DataLoader train(blobs(64), loader_options());
  Trainer trainer(*model, adam);
  TrainOptions to;
  to.epochs = 1;
  to.checkpoint = dir / "good.safetensors";
  trainer.fit(train, nullptr, to);
  const SafetensorsContent good = load_safetensors(to.checkpoint);

  auto variant = [&](const std::string& name, auto&& edit) {
    SafetensorsContent c = good;
    edit(c);
    save_safetensors(dir / name, c.tensors, c.metadata);
    return dir / name;
  };
  const auto before = model->state_dict().at("1.weight").to_vector<float>();
  const std::string bad_epoch = variant("epoch.safetensors", [](SafetensorsContent& c) { c.metadata["epoch"] = "-3"; });
  TESSERA_CHECK_THROWS_WITH(trainer.load_checkpoint(bad_epoch), "corrupt 'epoch' entry \"-3\"");
  const std::string junk = variant("junk.safetensors", [](SafetensorsContent& c) { c.metadata["rng_offset"] = "12abc"; });
  TESSERA_CHECK_THROWS_WITH(trainer.load_checkpoint(junk), "corrupt 'rng_offset' entry");
  const std::string nan = variant("nan.safetensors", [](SafetensorsContent& c) {
    Tensor w = c.tensors.at("model.1.weight").clone();
    w.view({-1}).narrow(0, 3, 1).fill_(NAN);
    c.tensors["model.1.weight"] = w;
  });
  TESSERA_CHECK_THROWS_WITH(trainer.load_checkpoint(nan), "'model.1.weight' holds NaN or Inf values");
  CHECK(model->state_dict().at("1.weight").to_vector<float>() == before);  // nothing changed
  const std::string relabelled = variant("i32.safetensors", [](SafetensorsContent& c) {
    const Tensor& w = c.tensors.at("model.1.bias");
    c.tensors["model.1.bias"] = empty(w.shape(), DType::i32);
    std::memcpy(c.tensors["model.1.bias"].data_ptr(), w.data_ptr(), w.nbytes());
  });
  TESSERA_CHECK_THROWS_WITH(trainer.load_checkpoint(relabelled), "dtype mismatch for '1.bias': checkpoint has int32, module has float32");
  const std::string no_state = variant("nostate.safetensors", [](SafetensorsContent& c) {
    std::erase_if(c.tensors, [](const auto& kv) { return kv.first.rfind("optimizer.", 0) == 0; });
  });
  TESSERA_CHECK_THROWS_WITH(trainer.load_checkpoint(no_state), "holds no optimizer state (pass --reset-optimizer");

  // Adam state cannot continue as SGD, unless the optimizer is reset on purpose.
  auto other = tiny_model();
  SGD sgd(other->parameters(), OptimOptions{.lr = 0.1});
  Trainer sgd_trainer(*other, sgd);
  TESSERA_CHECK_THROWS_WITH(sgd_trainer.load_checkpoint(to.checkpoint), "was trained with adam, this run uses sgd");
  CHECK(sgd_trainer.load_checkpoint(to.checkpoint, /*reset_optimizer=*/true) == 1);
  CHECK(other->state_dict().at("1.weight").to_vector<float>() == model->state_dict().at("1.weight").to_vector<float>());
  CHECK(sgd.steps() == 0);
}

TEST_CASE("a non-finite loss stops the run before it reaches the parameters or the checkpoint") {
  const TempDir dir;
  manual_seed(2);
  auto model = tiny_model();
  SGD sgd(model->parameters(), OptimOptions{.lr = 0.05});
  DataLoader train(blobs(64), loader_options());
  Trainer trainer(*model, sgd);
  TrainOptions to;
  to.epochs = 1;
  to.checkpoint = dir / "run.safetensors";
  trainer.fit(train, nullptr, to);
  const std::string saved = slurp(to.checkpoint);

  // Resume with a learning rate that blows the weights up: stop, naming the step; the
  // checkpoint stays byte-identical.
  to.epochs = 3;
  to.resume = true;
  to.resume_lr = 1e30;
  TESSERA_CHECK_THROWS_WITH(trainer.fit(train, nullptr, to), "train: non-finite");
  CHECK(slurp(to.checkpoint) == saved);

  // Parameters that went non-finite are never written.
  auto bad = tiny_model();
  Adam adam(bad->parameters(), OptimOptions{});
  Trainer bad_trainer(*bad, adam);
  bad->parameters()[0].detach().fill_(INFINITY);
  TESSERA_CHECK_THROWS_WITH(bad_trainer.save_checkpoint(to.checkpoint, 1, "{}"), "holds NaN or Inf values");
  CHECK(slurp(to.checkpoint) == saved);
}

TEST_CASE("--on-nonfinite skip drops the poisoned steps and trains on") {
  manual_seed(3);
  auto model = tiny_model();
  SGD sgd(model->parameters(), OptimOptions{.lr = 0.05});
  DataLoader train(blobs(128), loader_options());
  int64_t calls = 0;
  // Every third batch's loss is NaN (as a corrupt sample would make it).
  Trainer trainer(*model, sgd, nullptr, [&](const Tensor& out, const Tensor& y) {
    const Tensor loss = cross_entropy(out, y);
    return ++calls % 3 == 0 ? mul(loss, NAN) : loss;
  });
  TrainOptions to;
  to.epochs = 2;
  to.on_nonfinite = OnNonFinite::skip;
  const auto history = trainer.fit(train, nullptr, to);
  CHECK(history[0].skipped_steps + history[1].skipped_steps == 5);  // calls 3, 6, ..., 15 of 16
  CHECK(sgd.steps() == 16 - 5);
  CHECK(std::isfinite(history[1].train_loss));
  for (const Tensor& p : model->parameters()) CHECK(all_finite(p));
  to.on_nonfinite = OnNonFinite::stop;
  TESSERA_CHECK_THROWS_WITH(trainer.fit(train, nullptr, to), "non-finite loss at step");
  // A run whose steps are nearly all poisoned is diverging, not surviving: it fails.
  Trainer hopeless(*model, sgd, nullptr, [&](const Tensor& out, const Tensor& y) {
    const Tensor loss = cross_entropy(out, y);
    return ++calls % 8 == 0 ? loss : mul(loss, NAN);
  });
  to.epochs = 1;
  to.on_nonfinite = OnNonFinite::skip;
  TESSERA_CHECK_THROWS_WITH(hopeless.fit(train, nullptr, to), "optimizer steps of epoch 1 were skipped for non-finite values (more than 50%)");
}
