#pragma once
// Character-level text data: a byte vocabulary, a corpus read from a text file or a directory of
// them (Debian's `fortunes`), a deterministic train/validation split and random contiguous
// windows for language-model training.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

}  // namespace tessera::nn
