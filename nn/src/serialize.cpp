#include "tessera/nn/serialize.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tessera::nn {

namespace {
using json = nlohmann::json;

const char* st_dtype(DType dt) {
  switch (dt) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i8: return "I8";
    case DType::u8: return "U8";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::boolean: return "BOOL";
  }
  return "?";
}

DType parse_st_dtype(const std::string& s, const std::string& path) {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8, DType::u8, DType::i32, DType::i64, DType::boolean}) {
    if (s == st_dtype(dt)) return dt;
  }
  throw Error(detail::concat("load_safetensors: '", path, "' uses dtype ", s, ", which Tessera does not support"));
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(detail::concat("save_safetensors: writing '", path, "' failed: ", std::strerror(errno)));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Test hook: TESSERA_TEST_CRASH_IN_SAVE=N kills the process with SIGKILL half-way through
// writing the N-th file, to prove the previous file survives (tests/nn/checkpoint_crash).
int crash_countdown() {
  static int remaining = [] {
    const char* env = std::getenv("TESSERA_TEST_CRASH_IN_SAVE");
    return env ? std::atoi(env) : 0;
  }();
  return remaining > 0 ? --remaining : -1;
}
}  // namespace

void save_safetensors(const std::string& path, const StateDict& tensors, const Metadata& metadata) {
  json header = json::object();
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TESSERA_CHECK(t.defined(), "save_safetensors", "tensor '", name, "' is undefined");
    const Tensor c = t.detach().to(kCPU).contiguous();
    header[name] = {{"dtype", st_dtype(c.dtype())}, {"shape", c.shape()}, {"data_offsets", {offset, offset + c.nbytes()}}};
    offset += c.nbytes();
    host.push_back(c);
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  const uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));

  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  const std::string tmp = (dir / (target.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TESSERA_CHECK(fd >= 0, "save_safetensors", "cannot create '", tmp, "': ", std::strerror(errno));
  try {
    const bool crash = crash_countdown() == 0;
    write_all(fd, len, 8, tmp);
    write_all(fd, text.data(), text.size(), tmp);
    for (size_t i = 0; i < host.size(); ++i) {
      if (crash && i == host.size() / 2) ::raise(SIGKILL);
      write_all(fd, host[i].data_ptr(), host[i].nbytes(), tmp);
    }
    TESSERA_CHECK(::fsync(fd) == 0, "save_safetensors", "fsync of '", tmp, "' failed: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error(detail::concat("save_safetensors: cannot rename '", tmp, "' to '", path, "': ", why));
  }
  // Persist the rename itself.
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

SafetensorsContent load_safetensors(const std::string& path, Device device) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), "load_safetensors", "cannot open '", path, "'");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TESSERA_CHECK(bytes.size() >= 8, "load_safetensors", "'", path, "' is truncated (", bytes.size(), " bytes)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  TESSERA_CHECK(n <= bytes.size() - 8, "load_safetensors", "'", path, "' is truncated: header of ", n, " bytes declared, ",
                bytes.size() - 8, " present");
  json header;
  try {
    header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  } catch (const json::exception& e) {
    throw Error(detail::concat("load_safetensors: '", path, "' has a corrupt header: ", e.what()));
  }
  TESSERA_CHECK(header.is_object(), "load_safetensors", "'", path, "' header is not a JSON object");
  const uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;
  SafetensorsContent out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  try {
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        for (auto m = it->begin(); m != it->end(); ++m) out.metadata[m.key()] = m->get<std::string>();
        continue;
      }
      const DType dt = parse_st_dtype(it->at("dtype").get<std::string>(), path);
      const Shape shape = it->at("shape").get<Shape>();
      const auto offsets = it->at("data_offsets").get<std::vector<uint64_t>>();
      TESSERA_CHECK(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= data_size, "load_safetensors", "'",
                    path, "': tensor '", it.key(), "' lies outside the data section (truncated file?)");
      for (int64_t s : shape) TESSERA_CHECK(s >= 0, "load_safetensors", "'", path, "': negative size in '", it.key(), "'");
      TESSERA_CHECK(offsets[1] - offsets[0] == static_cast<uint64_t>(numel(shape)) * itemsize(dt), "load_safetensors", "'",
                    path, "': tensor '", it.key(), "' has ", offsets[1] - offsets[0], " bytes for shape ", shape_str(shape));
      ranges.emplace_back(offsets[0], offsets[1]);
      Tensor t = empty(shape, dt);
      std::memcpy(t.data_ptr(), data + offsets[0], offsets[1] - offsets[0]);
      out.tensors[it.key()] = t.to(device);
    }
  } catch (const json::exception& e) {
    throw Error(detail::concat("load_safetensors: '", path, "' has a malformed header entry: ", e.what()));
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t expect = 0;
  for (auto [b, e] : ranges) {
    TESSERA_CHECK(b == expect, "load_safetensors", "'", path, "': tensor data has gaps or overlaps at byte ", b);
    expect = e;
  }
  TESSERA_CHECK(expect == data_size, "load_safetensors", "'", path, "': ", data_size - expect, " bytes of data belong to no tensor");
  return out;
}

}  // namespace tessera::nn
