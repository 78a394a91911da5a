#pragma once
// Data: the IDX format (MNIST / Fashion-MNIST, raw or gzip), an in-memory dataset, batch
// transforms, and a DataLoader that prepares batches on worker threads ahead of the training
// step. Shuffling and random transforms are keyed by (seed, epoch, batch), so the batches are
// the same for any number of workers and when a run resumes mid-way.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::nn {

/**
 * Reads an IDX file (gzip-compressed or raw, detected from the content) into a u8 tensor of
 * the file's shape. Throws tessera::Error naming the file on a bad magic number, an unsupported
 * element type, a truncated file or trailing bytes.
 */
Tensor read_idx(const std::string& path);
/** read_idx on the bytes of a file already in memory; `name` appears in error messages. */
Tensor parse_idx(std::string bytes, const std::string& name);

/** Fashion-MNIST / MNIST split: images [N, 1, 28, 28] float32 in [0, 1], labels [N] int64. */
struct ImageSet {
  Tensor images, labels;
  int64_t size() const { return labels.numel(); }
};
/** Loads "train" or "test" from `dir` (files *-images-idx3-ubyte[.gz], *-labels-idx1-ubyte[.gz]). */
ImageSet load_mnist_split(const std::string& dir, const std::string& split, int64_t limit = -1);

struct Batch {
  Tensor x, y;
  int64_t index = 0;  // batch number within the epoch
};

/** A batch transform, given a generator keyed to this batch. */
using Transform = std::function<Tensor(const Tensor& x, Generator& gen)>;
/** (x - mean) / std per channel. */
Transform normalize(std::vector<double> mean, std::vector<double> std);
/** Zero-pads by `padding` and crops a random size x size window per image (two gathers). */
Transform random_crop(int64_t size, int64_t padding);
/** Flips each image left-right with probability p (one gather). */
Transform random_horizontal_flip(double p = 0.5);

struct LoaderOptions {
  int64_t batch_size = 128;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  int workers = 1;        ///< background threads preparing batches (0 = on the caller's thread; Kokkos with device transforms: always 0)
  int prefetch = 4;       ///< batches prepared ahead (bound of the queue)
  Device device = kCPU;   ///< batches are moved here (through pinned memory and an async copy on device backends)
  std::vector<Transform> transforms = {};         ///< on the host, before the upload (worker threads)
  /** On `device` after the upload (for device backends on the loader's copy stream, overlapping
   *  the training step), drawing from the same per-batch generator after `transforms`: moving a
   *  transform from one list to the other gives the same batches. */
  std::vector<Transform> device_transforms = {};
};

/**
 * What the Trainer reads: epochs of batches, each epoch's batches a function of (seed, epoch)
 * alone, so a run resumed at an epoch boundary sees the batches the uninterrupted run saw.
 * DataLoader (images) and WindowSource (text windows, text_data.h) are the two kinds.
 */
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  /** Batches of the current epoch (after start_epoch). */
  virtual int64_t batches() const = 0;
  /** Starts epoch `epoch`, skipping its first `skip` batches (for resuming). */
  virtual void start_epoch(int64_t epoch, int64_t skip = 0) = 0;
  /** Next batch of the current epoch; false when the epoch is done. */
  virtual bool next(Batch& out) = 0;
};

class DataLoader : public BatchSource {
 public:
  DataLoader(ImageSet data, LoaderOptions options);
  ~DataLoader() override;
  /** Batches per epoch. */
  int64_t batches() const override;
  int64_t samples() const { return data_.size(); }
  void start_epoch(int64_t epoch, int64_t skip = 0) override;
  bool next(Batch& out) override;
  const LoaderOptions& options() const { return options_; }

 private:
  Batch make_batch(int64_t epoch, int64_t index) const;
  /** options_.workers, or 0 where the device cannot take kernels from a worker thread. */
  int workers() const;
  struct Pipeline;
  ImageSet data_;
  LoaderOptions options_;
  std::unique_ptr<Pipeline> pipeline_;
};

}  // namespace tessera::nn
