#pragma once
// Character-level text data: a byte vocabulary, a corpus read from a text file or a directory of
// them (Debian's `fortunes`), a deterministic train/validation split and random contiguous
// windows for language-model training.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/nn/data.h"
#include "tessera/tessera.h"

namespace tessera::nn {

/** The distinct bytes of a text, sorted; token i is byte chars[i]. */
struct CharVocab {
  std::string chars;
  int64_t size() const { return static_cast<int64_t>(chars.size()); }
  /** Throws naming the first byte outside the vocabulary. */
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& tokens) const;
};

struct TextCorpus {
  CharVocab vocab;
  std::vector<int64_t> train, val;  ///< tokens
  std::string source;               ///< what was read ("/usr/share/games/fortunes (62 files)")
  int64_t bytes = 0;                ///< text length after cleaning
};

/**
 * Reads `path`: a text file, or a directory whose extension-less regular files are read in
 * name order (the fortune files; their `.dat` indexes and `.u8` links are skipped). Fortune
 * separators ("%" lines) become blank lines and overstruck characters ("x\b") are dropped.
 * The last `val_fraction` of the text is the validation split. Throws with the path for a
 * missing path, an empty text, or binary data (NUL bytes or many control bytes).
 */
TextCorpus load_text_corpus(const std::string& path, double val_fraction = 0.1);

/** The default corpus path of `tessera train --model gpt|lstm`. */
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

/**
 * `batch` random windows of `context + 1` tokens of `data` (starts drawn from `gen`) as inputs
 * [batch, context] and next-token targets [batch, context] (int64, on `device`).
 */
std::pair<Tensor, Tensor> sample_windows(const std::vector<int64_t>& data, int64_t batch, int64_t context, Generator& gen, Device device);

struct WindowOptions {
  int64_t batch = 32, context = 128;
  int64_t batches_per_epoch = 1;
  /** Batches of all epochs together: the epoch that reaches it is cut short (-1: no limit). */
  int64_t total_batches = -1;
  uint64_t seed = 0;
  /** Validation: every epoch draws the same windows (from `seed`), so evaluations compare. */
  bool same_every_epoch = false;
  Device device = kCPU;
};

/**
 * Language-model batches for the Trainer: random windows of a token sequence (sample_windows),
 * epoch e drawing from a generator seeded by (seed, e) alone, so a resumed run draws what the
 * uninterrupted one drew. x and y are [batch, context] int64, y shifted by one token.
 */
class WindowSource : public BatchSource {
 public:
  WindowSource(std::vector<int64_t> tokens, WindowOptions options);
  int64_t batches() const override { return batches_; }
  void start_epoch(int64_t epoch, int64_t skip = 0) override;
  bool next(Batch& out) override;
  const WindowOptions& options() const { return options_; }

 private:
  std::vector<int64_t> tokens_;
  WindowOptions options_;
  Generator gen_;
  int64_t batches_ = 0, done_ = 0;
};

}  // namespace tessera::nn
