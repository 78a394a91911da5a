// IDX reader. Format: bytes 0-1 zero, byte 2 element type (0x08 = u8), byte 3 rank, then
// rank big-endian u32 sizes, then the data. Files are read whole (regular files only, 4 GiB
// at most), gzip is inflated no further than the header declares, and the data must match
// the declared shape exactly before anything is allocated from it.
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "tessera/nn/data.h"
#include "tessera/nn/file_io.h"

namespace tessera::nn {

namespace {
// The largest IDX payload accepted (4 GiB; Fashion-MNIST's largest file is 47 MB). Deflate
// cannot expand more than 1032:1, so a gzip file declaring more than that is corrupt.
constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 32;
constexpr uint64_t kMaxDeflateRatio = 1032;

struct IdxHeader {
  Shape shape;
  size_t header_bytes = 0;
  uint64_t count = 0;
};

// Parses the header from the first bytes of the (decompressed) file; nullopt until enough
// bytes are present. The count is checked against the cap dimension by dimension, so a
// product cannot wrap around.
std::optional<IdxHeader> parse_header(const unsigned char* b, size_t size, const std::string& path) {
  if (size < 4) return std::nullopt;
  TESSERA_CHECK(b[0] == 0 && b[1] == 0, "read_idx", "'", path, "' is not an IDX file (bad magic number)");
  TESSERA_CHECK(b[2] == 0x08, "read_idx", "'", path, "' has element type 0x", std::hex, static_cast<int>(b[2]), std::dec,
                "; only unsigned bytes (0x08) are supported");
  const int rank = b[3];
  TESSERA_CHECK(rank >= 1 && rank <= 4, "read_idx", "'", path, "' declares ", rank, " dimensions");
  IdxHeader h;
  h.header_bytes = 4 + 4 * static_cast<size_t>(rank);
  if (size < h.header_bytes) return std::nullopt;
  h.count = 1;
  bool zero = false;
  for (int d = 0; d < rank; ++d) {
    const unsigned char* p = b + 4 + 4 * d;
    const uint64_t n = (uint64_t{p[0]} << 24) | (uint64_t{p[1]} << 16) | (uint64_t{p[2]} << 8) | p[3];
    h.shape.push_back(static_cast<int64_t>(n));
    zero |= n == 0;
    if (n != 0) h.count *= n;  // each factor < 2^32 and the running product <= 2^32: no overflow
    TESSERA_CHECK(zero || h.count <= kMaxIdxBytes, "read_idx", "'", path, "' declares ", shape_str(h.shape),
                  "..., more than the ", kMaxIdxBytes, "-byte limit");
  }
  if (zero) h.count = 0;
  return h;
}

// Inflates gzip data, stopping as soon as the output exceeds what the header declares.
std::string inflate_idx(const std::string& raw, const std::string& path) {
  std::string out;
  z_stream zs{};
  TESSERA_CHECK(inflateInit2(&zs, 15 + 32) == Z_OK, "read_idx", "zlib initialisation failed for '", path, "'");
  // Released on every path, the header checks' exceptions included (found by fuzz_idx: a
  // gzip stream whose first bytes are not an IDX header leaked zlib's state).
  struct End {
    z_stream* zs;
    ~End() { inflateEnd(zs); }
  } end{&zs};
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  zs.avail_in = static_cast<uInt>(raw.size());
  unsigned char buf[1 << 16];
  uint64_t limit = 4 + 4 * 4;  // until the header is known
  bool known = false;
  int rc = Z_OK;
  auto fail = [&](const std::string& why) { throw Error(detail::concat("read_idx: '", path, "' ", why)); };
  while (rc != Z_STREAM_END) {
    zs.next_out = buf;
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) fail(detail::concat("is not valid gzip data (", rc == Z_BUF_ERROR ? "truncated" : "corrupt", ")"));
    out.append(reinterpret_cast<const char*>(buf), sizeof buf - zs.avail_out);
    if (!known) {
      if (auto h = parse_header(reinterpret_cast<const unsigned char*>(out.data()), out.size(), path)) {
        known = true;
        limit = h->header_bytes + h->count;
        if (limit > kMaxDeflateRatio * raw.size() + 1024) {
          fail(detail::concat("declares ", shape_str(h->shape), " (", limit, " bytes), more than ", raw.size(),
                              " bytes of gzip data can hold: the file is truncated or corrupt"));
        }
        out.reserve(limit);
      }
    }
    if (out.size() > limit) {
      fail(detail::concat("inflates to more than the ", limit, " bytes its header declares (", known ? "trailing data" : "no valid header",
                          "); refusing to decompress further"));
    }
    if (rc != Z_STREAM_END && zs.avail_in == 0 && zs.avail_out != 0) fail("is truncated (gzip stream ends early)");
  }
  return out;
}
}  // namespace

Tensor read_idx(const std::string& path) { return parse_idx(read_regular_file(path, "read_idx", kMaxIdxBytes + 64), path); }

Tensor parse_idx(std::string b, const std::string& path) {
  if (b.size() >= 2 && static_cast<unsigned char>(b[0]) == 0x1f && static_cast<unsigned char>(b[1]) == 0x8b) {
    b = inflate_idx(b, path);
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(b.data());
  const auto h = parse_header(bytes, b.size(), path);
  TESSERA_CHECK(h.has_value(), "read_idx", "'", path, "' is truncated inside its header (", b.size(), " bytes)");
  const uint64_t data = b.size() - h->header_bytes;
  TESSERA_CHECK(data >= h->count, "read_idx", "'", path, "' is truncated: ", shape_str(h->shape), " needs ", h->count,
                " bytes of data, found ", data);
  TESSERA_CHECK(data == h->count, "read_idx", "'", path, "' has ", data - h->count, " unexpected trailing bytes after ",
                shape_str(h->shape));
  Tensor t = empty(h->shape, DType::u8);
  if (h->count) std::memcpy(t.data_ptr(), bytes + h->header_bytes, h->count);
  return t;
}

constexpr int64_t kMnistClasses = 10;

ImageSet load_mnist_split(const std::string& dir, const std::string& split, int64_t limit) {
  TESSERA_CHECK(split == "train" || split == "t10k" || split == "test", "load_mnist", "unknown split '", split, "'");
  const std::string prefix = split == "train" ? "train" : "t10k";
  auto find = [&](const std::string& stem) {
    for (const char* ext : {".gz", ""}) {
      const std::string p = dir + "/" + prefix + stem + ext;
      if (std::filesystem::exists(p)) return p;
    }
    throw Error(detail::concat("load_mnist: no ", prefix, stem, "[.gz] in '", dir,
                               "' (install Debian's dataset-fashion-mnist or pass --data)"));
  };
  Tensor images = read_idx(find("-images-idx3-ubyte"));
  Tensor labels = read_idx(find("-labels-idx1-ubyte"));
  TESSERA_CHECK(images.dim() == 3 && labels.dim() == 1 && images.size(0) == labels.size(0), "load_mnist",
                "images ", shape_str(images.shape()), " and labels ", shape_str(labels.shape()), " in '", dir, "' do not match");
  // MNIST and Fashion-MNIST have 10 classes: a larger label would index past the model's
  // outputs in the middle of an epoch; find it now, naming the first offender.
  if (labels.numel() > 0 && amax(labels).item<int64_t>() >= kMnistClasses) {
    const int64_t at = argmax(labels).item<int64_t>();
    throw Error(detail::concat("load_mnist: '", dir, "' ", split, " label ", labels.select(0, at).item<int64_t>(), " at index ", at,
                               " is not a class index 0-", kMnistClasses - 1));
  }
  int64_t n = images.size(0);
  if (limit >= 0) n = std::min(n, limit);
  ImageSet set;
  set.images = div(images.narrow(0, 0, n).to(DType::f32), 255.0).reshape({n, 1, images.size(1), images.size(2)});
  set.labels = labels.narrow(0, 0, n).to(DType::i64);
  return set;
}

}  // namespace tessera::nn
