// Character-level corpora for the language models.
#include "tessera/nn/text_data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera::nn {
namespace fs = std::filesystem;

std::vector<int64_t> CharVocab::encode(const std::string& text) const {
  int table[256];
  std::fill(std::begin(table), std::end(table), -1);
  for (size_t i = 0; i < chars.size(); ++i) table[static_cast<unsigned char>(chars[i])] = static_cast<int>(i);
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int t = table[static_cast<unsigned char>(text[i])];
    TESSERA_CHECK(t >= 0, "encode", "byte ", static_cast<int>(static_cast<unsigned char>(text[i])), " at offset ", i,
                  " is not in the model's vocabulary of ", chars.size(), " characters");
    out.push_back(t);
  }
  return out;
}

std::string CharVocab::decode(const std::vector<int64_t>& tokens) const {
  std::string out;
  out.reserve(tokens.size());
  for (int64_t t : tokens) {
    TESSERA_CHECK(t >= 0 && t < size(), "decode", "token ", t, " is outside the vocabulary of ", size());
    out.push_back(chars[static_cast<size_t>(t)]);
  }
  return out;
}

namespace {
std::string read_text_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  TESSERA_CHECK(in.good(), "text data", "cannot read '", p.string(), "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  int64_t control = 0;
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    TESSERA_CHECK(u != 0, "text data", "'", p.string(), "' holds NUL bytes: it is binary, not text");
    control += u < 32 && u != '\n' && u != '\t' && u != '\r' && u != '\b' && u != '\f';
  }
  TESSERA_CHECK(control * 100 <= static_cast<int64_t>(s.size()), "text data", "'", p.string(), "' looks binary (", control,
                " control bytes in ", s.size(), ")");
  return s;
}

// Drops "x\b" overstrikes, carriage returns and other control bytes; "%" separator lines of
// fortune files become empty lines.
std::string clean(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '\b') {
      if (!out.empty() && out.back() != '\n') out.pop_back();
      continue;
    }
    if (u < 32 && ch != '\n' && ch != '\t') continue;
    out.push_back(ch);
  }
  std::string joined;
  joined.reserve(out.size());
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) joined += (line == "%" ? std::string() : line) + "\n";
  return joined;
}
}  // namespace

TextCorpus load_text_corpus(const std::string& path, double val_fraction) {
  TESSERA_CHECK(val_fraction > 0 && val_fraction < 1, "text data", "val_fraction must be in (0, 1), got ", val_fraction);
  std::error_code ec;
  TESSERA_CHECK(fs::exists(path, ec), "text data", "'", path, "' does not exist",
                path == kFortunesDir ? " (install Debian's fortunes package: scripts/setup-deps)" : "");
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path)) {
      if (e.is_regular_file() && !e.is_symlink() && !e.path().has_extension()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    TESSERA_CHECK(!files.empty(), "text data", "directory '", path, "' has no text files (files without an extension)");
  } else {
    // A FIFO, device or socket would block or never end: only regular files are text data.
    TESSERA_CHECK(fs::is_regular_file(path, ec), "text data", "'", path, "' is not a regular file or a directory");
    files.push_back(path);
  }
  std::string text;
  for (const fs::path& f : files) text += clean(read_text_file(f));
  TESSERA_CHECK(text.size() >= 64, "text data", "'", path, "' holds ", text.size(), " characters of text: too little to train on");
  TextCorpus c;
  std::string chars = text;
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  c.vocab.chars = chars;
  const std::vector<int64_t> all = c.vocab.encode(text);
  const auto split = static_cast<size_t>(static_cast<double>(all.size()) * (1.0 - val_fraction));
  c.train.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(split));
  c.val.assign(all.begin() + static_cast<std::ptrdiff_t>(split), all.end());
  c.bytes = static_cast<int64_t>(text.size());
  c.source = files.size() > 1 ? detail::concat(path, " (", files.size(), " files)") : path;
  return c;
}

std::pair<Tensor, Tensor> sample_windows(const std::vector<int64_t>& data, int64_t batch, int64_t context, Generator& gen, Device device) {
  const auto n = static_cast<int64_t>(data.size());
  TESSERA_CHECK(batch > 0 && context > 0 && n > context + 1, "sample_windows", "need more than context + 1 = ", context + 1,
                " tokens, got ", n);
  const std::vector<int64_t> starts = randint(0, n - context - 1, {batch}, DType::i64, kCPU, &gen).to_vector<int64_t>();
  std::vector<int64_t> x(static_cast<size_t>(batch * context)), y(x.size());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t s = starts[static_cast<size_t>(b)];
    std::copy_n(data.begin() + s, context, x.begin() + b * context);
    std::copy_n(data.begin() + s + 1, context, y.begin() + b * context);
  }
  return {from_vector(x, {batch, context}, device), from_vector(y, {batch, context}, device)};
}

WindowSource::WindowSource(std::vector<int64_t> tokens, WindowOptions options)
    : tokens_(std::move(tokens)), options_(options), gen_(options.seed) {
  TESSERA_CHECK(options_.batch > 0 && options_.context > 0 && options_.batches_per_epoch > 0, "WindowSource",
                "batch, context and batches per epoch must be positive, got ", options_.batch, ", ", options_.context, ", ",
                options_.batches_per_epoch);
  TESSERA_CHECK(static_cast<int64_t>(tokens_.size()) > options_.context + 1, "WindowSource", "the text has ", tokens_.size(),
                " tokens: windows of ", options_.context, " need more than ", options_.context + 1);
  batches_ = options_.batches_per_epoch;
}

void WindowSource::start_epoch(int64_t epoch, int64_t skip) {
  TESSERA_CHECK(epoch >= 0 && skip >= 0, "WindowSource", "epoch and skip must be >= 0");
  // Epoch e's generator depends on (seed, e) only: a resumed run draws the same windows.
  gen_ = Generator(options_.same_every_epoch ? options_.seed : options_.seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(epoch + 1));
  batches_ = options_.batches_per_epoch;
  if (!options_.same_every_epoch && options_.total_batches >= 0) {
    batches_ = std::clamp<int64_t>(options_.total_batches - epoch * options_.batches_per_epoch, 0, options_.batches_per_epoch);
  }
  done_ = 0;
  Batch skipped;
  while (done_ < std::min(skip, batches_)) next(skipped);
}

bool WindowSource::next(Batch& out) {
  if (done_ >= batches_) return false;
  auto [x, y] = sample_windows(tokens_, options_.batch, options_.context, gen_, options_.device);
  out.x = std::move(x);
  out.y = std::move(y);
  out.index = done_++;
  return true;
}

}  // namespace tessera::nn
