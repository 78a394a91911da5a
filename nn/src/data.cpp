// Batch transforms and the prefetching DataLoader.
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "batch_upload.h"
#include "tessera/kernels/philox.h"
#include "tessera/runtime.h"
#include "tessera/nn/data.h"

namespace tessera::nn {

Transform normalize(std::vector<double> mean, std::vector<double> std) {
  TESSERA_CHECK(mean.size() == std.size() && !mean.empty(), "normalize", "mean and std need one value per channel");
  return [mean, std](const Tensor& x, Generator&) {
    const int64_t c = static_cast<int64_t>(mean.size());
    TESSERA_CHECK(x.dim() == 4 && x.size(1) == c, "normalize", "expected [N, ", c, ", H, W], got ", shape_str(x.shape()));
    const Tensor m = from_vector(mean, {1, c, 1, 1}).to(x.device()).to(x.dtype());
    const Tensor s = from_vector(std, {1, c, 1, 1}).to(x.device()).to(x.dtype());
    return div(sub(x, m), s);
  };
}

// Crop and flip are gathers with per-image index rows drawn on the host: a fixed number of
// kernels whatever the batch size (no per-image copies), pure data movement (the same bits on
// every backend), and the same draws as when the transform runs on the host.
Transform random_crop(int64_t size, int64_t padding) {
  TESSERA_CHECK(size >= 1 && padding >= 0, "random_crop", "size must be >= 1 and padding >= 0, got ", size, " and ", padding);
  return [size, padding](const Tensor& x, Generator& gen) {
    TESSERA_CHECK(x.dim() == 4, "random_crop", "expected [N, C, H, W], got ", shape_str(x.shape()));
    const int64_t n = x.size(0), h = x.size(2) + 2 * padding, w = x.size(3) + 2 * padding;
    TESSERA_CHECK(size <= h && size <= w, "random_crop", "crop ", size, " larger than padded image ", h, "x", w);
    Tensor padded = x;
    if (padding > 0) {
      padded = zeros({n, x.size(1), h, w}, x.dtype(), x.device());
      padded.narrow(2, padding, x.size(2)).narrow(3, padding, x.size(3)).copy_(x);
    }
    const std::vector<int64_t> dy = randint(0, h - size + 1, {n}, DType::i64, kCPU, &gen).to_vector<int64_t>();
    const std::vector<int64_t> dx = randint(0, w - size + 1, {n}, DType::i64, kCPU, &gen).to_vector<int64_t>();
    std::vector<int64_t> rows(static_cast<size_t>(n * size)), cols(rows.size());
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < size; ++k) rows[i * size + k] = dy[i] + k, cols[i * size + k] = dx[i] + k;
    }
    const Tensor r = from_vector(rows, {n, 1, size, 1}).to(x.device()), c = from_vector(cols, {n, 1, 1, size}).to(x.device());
    return take_along_axis(take_along_axis(padded, r, 2), c, 3);
  };
}

Transform random_horizontal_flip(double p) {
  TESSERA_CHECK(p >= 0 && p <= 1, "random_horizontal_flip", "p must be in [0, 1], got ", p);
  return [p](const Tensor& x, Generator& gen) {
    TESSERA_CHECK(x.dim() == 4, "random_horizontal_flip", "expected [N, C, H, W], got ", shape_str(x.shape()));
    const int64_t n = x.size(0), w = x.size(3);
    const std::vector<float> flip = bernoulli({n}, p, DType::f32, kCPU, &gen).to_vector<float>();
    std::vector<int64_t> cols(static_cast<size_t>(n * w));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < w; ++j) cols[i * w + j] = flip[i] != 0 ? w - 1 - j : j;
    }
    return take_along_axis(x, from_vector(cols, {n, 1, 1, w}).to(x.device()), 3);
  };
}

// Worker threads fill `ready` with batches [next_produce, end) at most `prefetch` ahead of
// the consumer; batches are keyed by index so their order never depends on the workers.
struct DataLoader::Pipeline {
  std::mutex mutex;
  std::condition_variable produced, consumed;
  std::map<int64_t, Batch> ready;
  int64_t next_produce = 0, next_consume = 0, end = 0, epoch = 0;
  bool stop = false;
  std::exception_ptr error;
  std::vector<std::thread> threads;
  std::vector<int64_t> order;
  std::mutex uploader_mutex;
  std::unique_ptr<detail::BatchUploader> uploader;  // device backends only, made on first use

  void shutdown() {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    consumed.notify_all();
    for (auto& t : threads) t.join();
    threads.clear();
  }
};

DataLoader::DataLoader(ImageSet data, LoaderOptions options)
    : data_(std::move(data)), options_(std::move(options)), pipeline_(std::make_unique<Pipeline>()) {
  TESSERA_CHECK(options_.batch_size > 0, "DataLoader", "batch_size must be positive, got ", options_.batch_size);
  TESSERA_CHECK(options_.workers >= 0 && options_.prefetch >= 1, "DataLoader", "workers must be >= 0 and prefetch >= 1");
}

DataLoader::~DataLoader() { pipeline_->shutdown(); }

int64_t DataLoader::batches() const {
  const int64_t n = data_.size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

Batch DataLoader::make_batch(int64_t epoch, int64_t index) const {
  NoGradGuard no_grad;
  const int64_t b = options_.batch_size, first = index * b, count = std::min(b, data_.size() - first);
  const std::vector<int64_t> ids(pipeline_->order.begin() + first, pipeline_->order.begin() + first + count);
  const Tensor idx = from_vector(ids, {count});
  Batch batch;
  batch.index = index;
  batch.x = index_select(data_.images, 0, idx);
  batch.y = index_select(data_.labels, 0, idx);
  // One generator per (epoch, batch): host transforms draw first, device transforms go on.
  Generator gen(options_.seed + 0x5DEECE66DULL);
  gen.set_offset((static_cast<uint64_t>(epoch) * 1000003ULL + static_cast<uint64_t>(index)) << 16);
  for (const Transform& t : options_.transforms) batch.x = t(batch.x, gen);
  const auto on_device = [&](Tensor& x) {
    for (const Transform& t : options_.device_transforms) x = t(x, gen);
  };
  Backend& backend = backend_for_device(options_.device, "DataLoader");
  if (backend.host_accessible()) {
    batch.x = batch.x.to(options_.device);
    batch.y = batch.y.to(options_.device);
    on_device(batch.x);
    return batch;
  }
  // Device backends: pooled pinned buffers and the loader's one copy stream (batch_upload.h);
  // the device transforms run on that stream too, overlapping the training step.
  {
    std::lock_guard lock(pipeline_->uploader_mutex);
    if (!pipeline_->uploader) pipeline_->uploader = std::make_unique<detail::BatchUploader>(options_.device);
  }
  const std::vector<Tensor> up = pipeline_->uploader->upload({batch.x, batch.y}, [&](std::vector<Tensor>& t) { on_device(t[0]); });
  batch.x = up[0];
  batch.y = up[1];
  return batch;
}

int DataLoader::workers() const {
  // Kokkos's host execution spaces (Serial, and OpenMP in 3.x) take kernels from one host thread
  // at a time, so device transforms on Kokkos run on the consuming thread, without workers.
  if (options_.device.type == DeviceType::kokkos && !options_.device_transforms.empty()) return 0;
  return options_.workers;
}

void DataLoader::start_epoch(int64_t epoch, int64_t skip) {
  Pipeline& p = *pipeline_;
  p.shutdown();
  const int64_t n = data_.size();
  p.order.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p.order[i] = i;
  if (options_.shuffle) {
    // Fisher-Yates driven by Philox(seed, epoch): the same permutation on every run.
    for (int64_t i = n - 1; i > 0; --i) {
      const auto w = kernels::philox_block(options_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(i));
      const uint64_t r = (static_cast<uint64_t>(w.v[0]) << 32) | w.v[1];
      std::swap(p.order[i], p.order[static_cast<int64_t>(r % static_cast<uint64_t>(i + 1))]);
    }
  }
  p.ready.clear();
  p.error = nullptr;
  p.stop = false;
  p.epoch = epoch;
  p.end = batches();
  p.next_produce = p.next_consume = std::min(skip, p.end);
  for (int t = 0; t < workers(); ++t) {
    p.threads.emplace_back([this, &p] {
      for (;;) {
        int64_t index;
        {
          std::unique_lock lock(p.mutex);
          p.consumed.wait(lock, [&] { return p.stop || (p.next_produce < p.end && p.next_produce < p.next_consume + options_.prefetch); });
          if (p.stop) return;
          index = p.next_produce++;
        }
        Batch b;
        std::exception_ptr err;
        try {
          b = make_batch(p.epoch, index);
        } catch (...) {
          err = std::current_exception();
        }
        {
          std::lock_guard lock(p.mutex);
          if (err && !p.error) p.error = err;
          if (!err) p.ready.emplace(index, std::move(b));
        }
        p.produced.notify_all();
      }
    });
  }
}

bool DataLoader::next(Batch& out) {
  Pipeline& p = *pipeline_;
  if (p.next_consume >= p.end) return false;
  // The batch was made on the loader's copy stream: once freed, its blocks return to the next
  // upload only after an event on this thread's stream shows its reads are done (allocator.h).
  const auto used_here = [&] {
    if (p.uploader) record_current_stream(out.x), record_current_stream(out.y);
  };
  if (workers() == 0) {
    out = make_batch(p.epoch, p.next_consume++);
    used_here();
    return true;
  }
  {
    std::unique_lock lock(p.mutex);
    p.produced.wait(lock, [&] { return p.error || p.ready.count(p.next_consume); });
    if (p.error) std::rethrow_exception(p.error);
    auto it = p.ready.find(p.next_consume);
    out = std::move(it->second);
    p.ready.erase(it);
    ++p.next_consume;
  }
  p.consumed.notify_all();
  used_here();
  return true;
}

}  // namespace tessera::nn
