// IDX reader. Format: bytes 0-1 zero, byte 2 element type (0x08 = u8), byte 3 rank, then
// rank big-endian u32 sizes, then the data. Whole files are small (<= 50 MB), so they are
// decompressed into memory and validated against the declared size before any use.
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tessera/nn/data.h"

namespace tessera::nn {

namespace {
std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), "read_idx", "cannot open '", path, "'");
  std::vector<unsigned char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (raw.size() < 2 || raw[0] != 0x1f || raw[1] != 0x8b) return raw;
  // gzip: inflate with zlib's gzip header detection (windowBits 15 + 32).
  std::vector<unsigned char> out;
  z_stream zs{};
  TESSERA_CHECK(inflateInit2(&zs, 15 + 32) == Z_OK, "read_idx", "zlib initialisation failed for '", path, "'");
  zs.next_in = raw.data();
  zs.avail_in = static_cast<uInt>(raw.size());
  unsigned char buf[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = buf;
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      throw Error(detail::concat("read_idx: '", path, "' is not valid gzip data (", rc == Z_BUF_ERROR ? "truncated" : "corrupt",
                                 ")"));
    }
    out.insert(out.end(), buf, buf + (sizeof buf - zs.avail_out));
    if (rc != Z_STREAM_END && zs.avail_in == 0 && zs.avail_out != 0) {
      inflateEnd(&zs);
      throw Error(detail::concat("read_idx: '", path, "' is truncated (gzip stream ends early)"));
    }
  }
  inflateEnd(&zs);
  return out;
}
}  // namespace

Tensor read_idx(const std::string& path) {
  const std::vector<unsigned char> b = read_bytes(path);
  TESSERA_CHECK(b.size() >= 4 && b[0] == 0 && b[1] == 0, "read_idx", "'", path, "' is not an IDX file (bad magic number)");
  TESSERA_CHECK(b[2] == 0x08, "read_idx", "'", path, "' has element type 0x", std::hex, static_cast<int>(b[2]), std::dec,
                "; only unsigned bytes (0x08) are supported");
  const int rank = b[3];
  TESSERA_CHECK(rank >= 1 && rank <= 4, "read_idx", "'", path, "' declares ", rank, " dimensions");
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  TESSERA_CHECK(b.size() >= header, "read_idx", "'", path, "' is truncated inside its header");
  Shape shape;
  uint64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    const unsigned char* p = b.data() + 4 + 4 * d;
    const uint64_t n = (uint64_t{p[0]} << 24) | (uint64_t{p[1]} << 16) | (uint64_t{p[2]} << 8) | p[3];
    shape.push_back(static_cast<int64_t>(n));
    count *= n;
    TESSERA_CHECK(count <= (uint64_t{1} << 34), "read_idx", "'", path, "' declares an implausible size");
  }
  TESSERA_CHECK(b.size() - header >= count, "read_idx", "'", path, "' is truncated: ", shape_str(shape), " needs ", count,
                " bytes of data, found ", b.size() - header);
  TESSERA_CHECK(b.size() - header == count, "read_idx", "'", path, "' has ", b.size() - header - count,
                " unexpected trailing bytes after ", shape_str(shape));
  Tensor t = empty(shape, DType::u8);
  std::memcpy(t.data_ptr(), b.data() + header, count);
  return t;
}

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
  TESSERA_CHECK(amax(labels).item<int64_t>() < 256, "load_mnist", "bad labels");
  int64_t n = images.size(0);
  if (limit >= 0) n = std::min(n, limit);
  ImageSet set;
  set.images = div(images.narrow(0, 0, n).to(DType::f32), 255.0).reshape({n, 1, images.size(1), images.size(2)});
  set.labels = labels.narrow(0, 0, n).to(DType::i64);
  return set;
}

}  // namespace tessera::nn
