// IDX parsing (raw and gzip, with every kind of damage), the DataLoader's determinism across
// worker counts, and the batch transforms.
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "support/checks.h"
#include "tessera/nn/data.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;

namespace {
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tessera_test_" + std::to_string(::getpid()) + "_" + name)).string();
}
std::vector<unsigned char> idx_bytes(const std::vector<uint32_t>& dims, int fill) {
  std::vector<unsigned char> b = {0, 0, 0x08, static_cast<unsigned char>(dims.size())};
  size_t count = 1;
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(d >> s));
    count *= d;
  }
  for (size_t i = 0; i < count; ++i) b.push_back(static_cast<unsigned char>((i * 7 + fill) % 256));
  return b;
}
void write_raw(const std::string& path, const std::vector<unsigned char>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void write_gz(const std::string& path, const std::vector<unsigned char>& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
  gzclose(f);
}
}  // namespace

TEST_CASE("IDX files load raw and gzip-compressed") {
  const auto bytes = idx_bytes({3, 4, 5}, 1);
  const std::string raw = temp_path("a.idx"), gz = temp_path("a.idx.gz");
  write_raw(raw, bytes);
  write_gz(gz, bytes);
  for (const std::string& p : {raw, gz}) {
    const Tensor t = read_idx(p);
    CHECK(t.shape() == Shape{3, 4, 5});
    CHECK(t.dtype() == DType::u8);
    CHECK(t.to_vector<uint8_t>()[10] == static_cast<uint8_t>((10 * 7 + 1) % 256));
  }
  std::filesystem::remove(raw);
  std::filesystem::remove(gz);
}

TEST_CASE("damaged IDX files give clear errors, never out-of-bounds reads") {
  const auto good = idx_bytes({2, 3}, 0);
  const std::string p = temp_path("bad.idx");
  auto expect = [&](std::vector<unsigned char> b, const char* msg, bool gz = false) {
    gz ? write_gz(p, b) : write_raw(p, b);
    TESSERA_CHECK_THROWS_WITH(read_idx(p), msg);
  };
  auto truncated = good;
  truncated.pop_back();
  expect(truncated, "is truncated: [2, 3] needs 6 bytes of data, found 5");
  auto trailing = good;
  trailing.push_back(9);
  expect(trailing, "1 unexpected trailing bytes");
  auto magic = good;
  magic[0] = 1;
  expect(magic, "is not an IDX file (bad magic number)");
  auto type = good;
  type[2] = 0x0D;
  expect(type, "has element type 0xd; only unsigned bytes");
  expect({0, 0, 8, 3, 0, 0}, "is truncated inside its header");
  expect(truncated, "is truncated", true);
  // A gzip stream cut in the middle.
  write_gz(p, idx_bytes({64, 64}, 3));
  std::filesystem::resize_file(p, std::filesystem::file_size(p) / 2);
  TESSERA_CHECK_THROWS_WITH(read_idx(p), "truncated");
  std::filesystem::remove(p);
  TESSERA_CHECK_THROWS_WITH(read_idx(p), "read_idx: cannot open");
  TESSERA_CHECK_THROWS_WITH(load_mnist_split("/nonexistent", "train"), "load_mnist: no train-images-idx3-ubyte[.gz] in '/nonexistent'");
}

namespace {
ImageSet synthetic(int64_t n) {
  ImageSet s;
  s.images = arange(0.0, static_cast<double>(n * 16), 1.0).reshape({n, 1, 4, 4});
  s.labels = arange(n, DType::i64);
  return s;
}
std::vector<std::vector<int64_t>> epoch_labels(DataLoader& dl, int64_t epoch, int64_t skip = 0) {
  std::vector<std::vector<int64_t>> out;
  dl.start_epoch(epoch, skip);
  Batch b;
  while (dl.next(b)) out.push_back(b.y.to_vector<int64_t>());
  return out;
}
}  // namespace

TEST_CASE("the DataLoader gives the same batches for any number of workers") {
  LoaderOptions o;
  o.batch_size = 7;
  o.seed = 3;
  o.device = device();
  o.transforms = {random_crop(4, 1), random_horizontal_flip(0.5), normalize({1.0}, {2.0})};
  std::vector<std::vector<std::vector<int64_t>>> runs;
  std::vector<std::vector<float>> first_x;
  for (int workers : {0, 1, 3}) {
    o.workers = workers;
    DataLoader dl(synthetic(50), o);
    CHECK(dl.batches() == 8);
    runs.push_back(epoch_labels(dl, 1));
    dl.start_epoch(1);
    Batch b;
    REQUIRE(dl.next(b));
    CHECK(b.x.device() == device());
    CHECK(b.x.shape() == Shape{7, 1, 4, 4});
    first_x.push_back(b.x.to_vector<float>());
  }
  CHECK(runs[0] == runs[1]);
  CHECK(runs[1] == runs[2]);
  // On device backends batches are staged in pinned memory (the emulator counts them).
  for (const auto& [key, value] : backend_for(device().type).build_info()) {
    if (key == "pinned allocations") CHECK(std::stoll(value) > 0);
  }
  CHECK(first_x[0] == first_x[2]);
  // Every sample exactly once, a different order per epoch, and resuming skips batches.
  o.workers = 2;
  o.transforms.clear();
  DataLoader dl(synthetic(50), o);
  std::vector<int64_t> seen;
  for (auto& b : runs[0]) seen.insert(seen.end(), b.begin(), b.end());
  std::sort(seen.begin(), seen.end());
  CHECK(seen == arange(50, DType::i64).to_vector<int64_t>());
  CHECK(epoch_labels(dl, 1) != epoch_labels(dl, 2));
  const auto all = epoch_labels(dl, 4), tail = epoch_labels(dl, 4, 5);
  CHECK(std::vector<std::vector<int64_t>>(all.begin() + 5, all.end()) == tail);
  o.drop_last = true;
  o.shuffle = false;
  DataLoader dropping(synthetic(50), o);
  const auto ordered = epoch_labels(dropping, 0);
  CHECK(ordered.size() == 7);
  CHECK(ordered[0] == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6});
}

TEST_CASE("transforms: normalize, random crop with padding, horizontal flip") {
  Generator gen(1);
  const Tensor x = arange(0.0, 32.0).reshape({2, 1, 4, 4}).to(device());
  CHECK(normalize({2.0}, {4.0})(x, gen).to_vector<float>()[6] == doctest::Approx(1.0));
  const Tensor cropped = random_crop(4, 2)(x, gen);
  CHECK(cropped.shape() == Shape{2, 1, 4, 4});
  CHECK(sum(cropped).item<double>() <= sum(x).item<double>());
  Generator always(2);
  const Tensor flipped = random_horizontal_flip(1.0)(x, always);
  CHECK(flipped.select(0, 0).select(0, 0).select(0, 0).to_vector<float>() == std::vector<float>{3, 2, 1, 0});
  TESSERA_CHECK_THROWS_WITH(normalize({0.5, 0.5}, {1, 1})(x, gen), "normalize: expected [N, 2, H, W]");
}

TEST_CASE("device-side preprocessing gives the host's batches, bit for bit, on every backend") {
  // The reference: every transform on the host, batches on the CPU.
  LoaderOptions o;
  o.batch_size = 9;
  o.seed = 11;
  o.workers = 1;
  const std::vector<Transform> prep = {random_crop(4, 2), random_horizontal_flip(0.5), normalize({0.25}, {0.75})};
  const auto epoch_images = [](LoaderOptions options) {
    DataLoader dl(synthetic(40), options);
    std::vector<std::vector<float>> out;
    for (int64_t epoch : {0, 1}) {
      dl.start_epoch(epoch);
      Batch b;
      while (dl.next(b)) {
        REQUIRE(b.x.device() == options.device);
        out.push_back(b.x.to_vector<float>());
      }
    }
    return out;
  };
  o.device = kCPU;
  o.transforms = prep;
  const auto reference = epoch_images(o);
  REQUIRE(reference.size() == 10);
  CHECK(reference[0] != reference[5]);  // the draws differ per epoch
  o.device = device();
  CHECK(epoch_images(o) == reference);  // host transforms, uploaded
  o.transforms.clear();
  o.device_transforms = prep;
  CHECK(epoch_images(o) == reference);  // the same transforms on the device, on the loader's stream
  o.workers = 0;
  CHECK(epoch_images(o) == reference);
  o.workers = 2;  // split between the lists: the draws continue from host to device
  o.transforms = {prep[0]};
  o.device_transforms = {prep[1], prep[2]};
  CHECK(epoch_images(o) == reference);
}

TEST_CASE("crop and flip move pixels only: a flipped crop holds the padded image's values") {
  Generator gen(5);
  const Tensor x = add(arange(0.0, 2.0 * 3 * 5 * 5).reshape({2, 3, 5, 5}), 1.0).to(device());
  const Tensor crop = random_crop(5, 0)(x, gen);
  CHECK(crop.to_vector<float>() == x.to_vector<float>());  // no padding, full size: the identity
  const Tensor padded = random_crop(3, 1)(x, gen);
  CHECK(padded.shape() == Shape{2, 3, 3, 3});
  const std::vector<float> source = x.to_vector<float>();
  for (float v : padded.to_vector<float>()) CHECK((v == 0 || std::find(source.begin(), source.end(), v) != source.end()));
  Generator never(1);
  CHECK(random_horizontal_flip(0.0)(x, never).to_vector<float>() == x.to_vector<float>());
  TESSERA_CHECK_THROWS_WITH(random_crop(0, 1), "random_crop: size must be >= 1");
  TESSERA_CHECK_THROWS_WITH(random_horizontal_flip(1.5), "random_horizontal_flip: p must be in [0, 1]");
}

TEST_CASE("the DataLoader reuses its pinned buffers across batches and epochs") {
  LoaderOptions o;
  o.batch_size = 5;
  o.device = device();
  o.workers = 2;
  const auto pinned_allocations = [] {
    for (const auto& [key, value] : backend_for(device().type).build_info()) {
      if (key == "pinned allocations") return std::stoll(value);
    }
    return -1LL;  // a backend without a count (cpu, kokkos)
  };
  const long long before = pinned_allocations();
  DataLoader dl(synthetic(50), o);
  std::vector<float> sums;
  for (int epoch = 0; epoch < 3; ++epoch) {
    dl.start_epoch(epoch);
    Batch b;
    while (dl.next(b)) sums.push_back(sum(b.x).item<float>());
  }
  CHECK(sums.size() == 30);
  if (before >= 0) {
    // 60 host tensors went up; one copy at a time through the pool needs a pair of buffers
    // (a ragged last batch would add another pair).
    CHECK(pinned_allocations() - before <= 4);
    CHECK(pinned_allocations() - before >= 2);
  }
}

TEST_CASE("1,000 batches pass through a memory limit of four batches with no device-wide sync") {
  // 1 KiB images, one per batch: each batch is two blocks of the copy stream, read on the
  // consumer's stream and freed while those reads may still be queued.
  const int64_t n = 1000;
  ImageSet s;
  s.images = arange(0.0, static_cast<double>(n * 256), 1.0).reshape({n, 1, 16, 16});
  s.labels = arange(n, DType::i64);
  LoaderOptions o;
  o.batch_size = 1;
  o.device = device();
  o.workers = 1;
  o.prefetch = 2;
  DataLoader dl(s, o);
  synchronize(device());
  empty_cache(device());
  const int64_t batch_bytes = 1024 + 512;  // the allocator's buckets for x and y
  const int64_t syncs_before = memory_stats(device()).device_syncs;
  set_memory_limit(device(), memory_stats(device()).reserved_bytes + 4 * batch_bytes + 2048);  // + the sums' results
  double total = 0;
  int64_t batches = 0;
  dl.start_epoch(0);
  Batch b;
  try {
    while (dl.next(b)) {
      total += sum(b.x).item<double>();
      ++batches;
    }
  } catch (...) {
    set_memory_limit(device(), 0);
    throw;
  }
  set_memory_limit(device(), 0);
  CHECK(batches == n);
  CHECK(total == doctest::Approx(static_cast<double>(n * 256) * (n * 256 - 1) / 2));
  CHECK(memory_stats(device()).device_syncs == syncs_before);
}
