// safetensors: round trips of every dtype, the exact byte layout of the format, and
// rejection of truncated or corrupt files.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/checks.h"
#include "tessera/nn/serialize.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;

namespace {
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tessera_st_" + std::to_string(::getpid()) + "_" + name)).string();
}
std::vector<char> slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void spit(const std::string& p, const std::vector<char>& b) { std::ofstream(p, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size())); }
}  // namespace

TEST_CASE("safetensors round trip keeps every dtype, shape and metadata") {
  StateDict sd;
  sd["a.f32"] = make_input({2, 3}, DType::f32, 1, -2, 2, Layout::transposed);
  sd["b.f64"] = make_input({4}, DType::f64, 2);
  sd["c.f16"] = make_input({3, 1}, DType::f16, 3);
  sd["d.bf16"] = make_input({2}, DType::bf16, 4);
  sd["e.i64"] = make_input({5}, DType::i64, 5, -100, 100);
  sd["f.i32"] = make_input({2, 2}, DType::i32, 6, -100, 100);
  sd["g.u8"] = make_input({3}, DType::u8, 7, 0, 255);
  sd["h.i8"] = make_input({3}, DType::i8, 8, -100, 100);
  sd["i.bool"] = make_input({4}, DType::boolean, 9);
  sd["j.empty"] = zeros({0, 3}, DType::f32, device());
  sd["k.scalar"] = scalar_tensor(3.5, DType::f32, device());
  const std::string p = temp_path("rt.safetensors");
  save_safetensors(p, sd, {{"epoch", "3"}, {"note", "ok"}});
  const SafetensorsContent c = load_safetensors(p, device());
  CHECK(c.metadata.at("epoch") == "3");
  REQUIRE(c.tensors.size() == sd.size());
  for (const auto& [k, t] : sd) {
    CAPTURE(k);
    const Tensor& u = c.tensors.at(k);
    CHECK(u.dtype() == t.dtype());
    CHECK(u.shape() == t.shape());
    CHECK(u.device() == device());
    TESSERA_CHECK_CLOSE(u, to_ref(t), Tolerance{0, 0});
  }
  std::filesystem::remove(p);
}

TEST_CASE("the byte layout follows the safetensors specification") {
  const std::string p = temp_path("layout.safetensors");
  save_safetensors(p, {{"w", from_vector<float>({1.0f, 2.0f}, {1, 2})}, {"b", from_vector<int64_t>({7}, {1})}}, {{"k", "v"}});
  const std::vector<char> bytes = slurp(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  CHECK((8 + n) % 8 == 0);
  const auto header = nlohmann::json::parse(std::string(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n)));
  CHECK(header["__metadata__"]["k"] == "v");
  CHECK(header["b"]["dtype"] == "I64");
  CHECK(header["b"]["data_offsets"] == nlohmann::json::array({0, 8}));
  CHECK(header["w"]["dtype"] == "F32");
  CHECK(header["w"]["shape"] == nlohmann::json::array({1, 2}));
  CHECK(header["w"]["data_offsets"] == nlohmann::json::array({8, 16}));
  CHECK(bytes.size() == 8 + n + 16);
  float w1;
  std::memcpy(&w1, bytes.data() + 8 + n + 8 + 4, 4);  // little-endian f32 data, in place
  CHECK(w1 == 2.0f);
  // A file built by hand from the specification (as another implementation would write it).
  const std::string hdr = R"({"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  std::vector<char> hand(8, 0);
  hand[0] = static_cast<char>(hdr.size());
  hand.insert(hand.end(), hdr.begin(), hdr.end());
  const uint16_t halves[2] = {0x3c00, 0xc000};  // 1.0, -2.0
  hand.insert(hand.end(), reinterpret_cast<const char*>(halves), reinterpret_cast<const char*>(halves) + 4);
  spit(p, hand);
  const auto c = load_safetensors(p);
  CHECK(c.tensors.at("x").to_vector<float>() == std::vector<float>{1.0f, -2.0f});
  std::filesystem::remove(p);
}

TEST_CASE("corrupt and truncated safetensors files are rejected with the file named") {
  const std::string p = temp_path("bad.safetensors");
  save_safetensors(p, {{"w", ones({4, 4})}});
  const std::vector<char> good = slurp(p);
  auto expect = [&](std::vector<char> b, const char* msg) {
    spit(p, b);
    TESSERA_CHECK_THROWS_WITH(load_safetensors(p), msg);
  };
  expect(std::vector<char>(good.begin(), good.end() - 10), "lies outside the data section");
  expect(std::vector<char>(good.begin(), good.begin() + 5), "is truncated (5 bytes)");
  expect(std::vector<char>(good.begin(), good.begin() + 20), "is truncated: header of");
  auto garbled = good;
  garbled[8] = '#';
  expect(garbled, "has a corrupt header");
  auto extra = good;
  extra.push_back(0);
  expect(extra, "1 bytes of data belong to no tensor");
  std::filesystem::remove(p);
  TESSERA_CHECK_THROWS_WITH(load_safetensors(p), "load_safetensors: cannot open");
  TESSERA_CHECK_THROWS_WITH(save_safetensors("/nonexistent-dir/x.safetensors", {}), "save_safetensors: cannot create");
}
