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

#include "tessera/nn/file_io.h"

namespace tessera::nn {

namespace {
using json = nlohmann::json;
constexpr uint64_t kMaxSafetensorsBytes = uint64_t{1} << 40;  // 1 TiB: a bound, not a policy

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

// Test hook: TESSERA_TEST_CRASH_IN_SAVE=N kills the process with SIGKILL half-way through
// writing the N-th file (or before tensor TESSERA_TEST_CRASH_TENSOR, modulo the count), to
// prove the previous file survives (tests/nn/checkpoint_crash, tests/tools/cli_faults.sh).
int crash_countdown() {
  static int remaining = [] {
    const char* env = std::getenv("TESSERA_TEST_CRASH_IN_SAVE");
    return env ? std::atoi(env) : 0;
  }();
  return remaining > 0 ? --remaining : -1;
}
size_t crash_tensor(size_t count) {
  const char* env = std::getenv("TESSERA_TEST_CRASH_TENSOR");
  return env ? static_cast<size_t>(std::atoi(env)) % std::max<size_t>(count, 1) : count / 2;
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

  AtomicFileWriter out(path, "save_safetensors");
  const bool crash = crash_countdown() == 0;
  out.write(len, 8);
  out.write(text);
  for (size_t i = 0; i < host.size(); ++i) {
    if (crash && i == crash_tensor(host.size())) ::raise(SIGKILL);
    out.write(host[i].data_ptr(), host[i].nbytes());
  }
  out.commit();
}

Metadata read_safetensors_metadata(const std::string& path) {
  // The header is at most a few MB for any real model; the bound keeps a crafted length from
  // allocating gigabytes.
  constexpr uint64_t kMaxHeader = uint64_t{100} << 20;
  const std::string head = read_regular_file_prefix(path, "read_safetensors_metadata", 8 + kMaxHeader);
  TESSERA_CHECK(head.size() >= 8, "read_safetensors_metadata", "'", path, "' is truncated (", head.size(), " bytes)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head[i]);
  TESSERA_CHECK(n <= head.size() - 8, "read_safetensors_metadata", "'", path, "' is truncated or its header is over ", kMaxHeader, " bytes");
  Metadata out;
  try {
    const json header = json::parse(head.begin() + 8, head.begin() + 8 + static_cast<std::ptrdiff_t>(n));
    if (header.is_object() && header.contains("__metadata__")) {
      for (const auto& [k, v] : header["__metadata__"].items()) out[k] = v.get<std::string>();
    }
  } catch (const json::exception& e) {
    throw Error(detail::concat("read_safetensors_metadata: '", path, "' has a corrupt header: ", e.what()));
  }
  return out;
}

SafetensorsContent load_safetensors(const std::string& path, Device device) {
  return parse_safetensors(read_regular_file(path, "load_safetensors", kMaxSafetensorsBytes), path, device);
}

SafetensorsContent parse_safetensors(const std::string& bytes, const std::string& path, Device device) {
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
      // Integers only: nlohmann converts a JSON float such as 6e52 to an integer type with
      // undefined behaviour (found by fuzz_checkpoint).
      auto integers = [&](const char* field) {
        const json& v = it->at(field);
        TESSERA_CHECK(v.is_array(), "load_safetensors", "'", path, "': '", field, "' of tensor '", it.key(), "' is not an array");
        for (const json& e : v) {
          TESSERA_CHECK(e.is_number_integer(), "load_safetensors", "'", path, "': '", field, "' of tensor '", it.key(),
                        "' holds ", e.dump(), ", not an integer");
        }
        return &v;
      };
      const Shape shape = integers("shape")->get<Shape>();
      const json& offsets_json = *integers("data_offsets");
      for (const json& e : offsets_json) {
        TESSERA_CHECK(e.is_number_unsigned(), "load_safetensors", "'", path, "': tensor '", it.key(), "' has a negative data offset");
      }
      const auto offsets = offsets_json.get<std::vector<uint64_t>>();
      TESSERA_CHECK(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= data_size, "load_safetensors", "'",
                    path, "': tensor '", it.key(), "' lies outside the data section (truncated file?)");
      const std::string what = detail::concat("load_safetensors: '", path, "': tensor '", it.key(), "'");
      const auto nbytes = static_cast<uint64_t>(checked_nbytes(shape, itemsize(dt), what.c_str()));
      TESSERA_CHECK(offsets[1] - offsets[0] == nbytes, what, "has ", offsets[1] - offsets[0], " bytes for shape ", shape_str(shape));
      if (dt == DType::boolean) {  // any other byte is not a bool: reading it is undefined behaviour
        const auto* b = reinterpret_cast<const unsigned char*>(data + offsets[0]);
        TESSERA_CHECK(std::all_of(b, b + nbytes, [](unsigned char v) { return v <= 1; }), what, "holds BOOL bytes other than 0 and 1");
      }
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
