// The AMX bf16 GEMM (backends/cpu/gemm_amx.h) against an f64 reference of the same bf16
// inputs: ragged shapes (partial tiles, K not a multiple of 32), several K slabs (partial sums
// in f32, the last slab rounded to bf16), transposed operands, batches, and a linear layer with
// bias (the f32-result path and its epilogue). Two CTest runs: TESSERA_TEST_AMX=emulated (with
// TESSERA_CPU_AMX=emulate: the driver and the tile program on the software tile unit, on any
// machine) and TESSERA_TEST_AMX=hardware (the tiles themselves; skipped, exit 77, where the CPU
// has no AMX). Each first checks that the path it tests is the one the backend chose.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "tessera/backend/registry.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {
std::string bf16_gemm_variant() {
  for (const auto& [key, value] : find_backend(DeviceType::cpu)->device_info(0).properties)
    if (key == "bf16 GEMM") return value;
  return "";
}

// |got - want| <= half a bf16 ulp of |want| (the rounding of the result) + the f32 accumulation
// error of k products of magnitude <= scale.
void check_close(const Tensor& got_bf16, const Tensor& want_f64, int64_t k, double scale) {
  REQUIRE(got_bf16.dtype() == DType::bf16);
  REQUIRE(got_bf16.shape() == want_f64.shape());
  const std::vector<double> got = got_bf16.to(DType::f64).to_vector<double>(), want = want_f64.to_vector<double>();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = std::ldexp(std::fabs(want[i]), -8) + 4e-7 * static_cast<double>(k) * scale + 1e-30;
    if (!(std::fabs(got[i] - want[i]) <= tol) && bad++ == 0) first = i;
  }
  CAPTURE(first);
  CAPTURE(got.empty() ? 0.0 : got[first]);
  CAPTURE(want.empty() ? 0.0 : want[first]);
  CHECK(bad == 0);
}

Tensor ref_matmul(const Tensor& a, const Tensor& b) { return matmul(a.to(DType::f64), b.to(DType::f64)); }
}  // namespace

TEST_CASE("bf16 matmul on AMX tiles: ragged M, N, K, one to three K slabs, against f64") {
  manual_seed(11);
  const int64_t shapes[][3] = {{1, 1, 1},     {31, 33, 31},    {32, 32, 32},    {64, 96, 64},    {7, 513, 40},
                               {129, 65, 97}, {33, 300, 1100}, {130, 70, 2100}, {256, 256, 1024}};
  for (const auto& s : shapes) {
    const int64_t m = s[0], n = s[1], k = s[2];
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    const Tensor a = sub(mul(rand({m, k}), 2.0), 1.0).to(DType::bf16), b = sub(mul(rand({k, n}), 2.0), 1.0).to(DType::bf16);
    check_close(matmul(a, b), ref_matmul(a, b), k, 1.0);
  }
}

TEST_CASE("bf16 matmul on AMX tiles: transposed operands and batches") {
  manual_seed(12);
  const Tensor at = randn({70, 45}).to(DType::bf16), b = randn({70, 37}).to(DType::bf16);  // A = at^T: K strided
  check_close(matmul(at.mT(), b), ref_matmul(at.mT(), b), 70, 16.0);
  const Tensor a = randn({45, 70}).to(DType::bf16), bt = randn({37, 70}).to(DType::bf16);  // B = bt^T: a weight
  check_close(matmul(a, bt.mT()), ref_matmul(a, bt.mT()), 70, 16.0);
  const Tensor x = randn({3, 17, 50}).to(DType::bf16), y = randn({3, 50, 40}).to(DType::bf16);
  check_close(matmul(x, y), ref_matmul(x, y), 50, 16.0);
}

TEST_CASE("bf16 linear with bias on AMX tiles: the f32 result and its epilogue") {
  manual_seed(13);
  const Tensor x = randn({40, 200}).to(DType::bf16), w = randn({90, 200}).to(DType::bf16), bias = randn({90}).to(DType::bf16);
  const Tensor want = add(ref_matmul(x, w.mT()), bias.to(DType::f64));
  check_close(linear(x, w, bias), want, 200, 16.0);
}

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const char* expect = std::getenv("TESSERA_TEST_AMX");
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing |= std::strncmp(argv[i], "--list", 6) == 0 || std::strncmp(argv[i], "-l", 2) == 0;
  if (!listing && expect) {
    const std::string variant = bf16_gemm_variant();
    if (std::strcmp(expect, "hardware") == 0 && variant.rfind("amx (", 0) != 0) {
      std::cout << "SKIPPED: the AMX tiles do not run here (bf16 GEMM: " << variant << ")\n";
      return 77;
    }
    if (std::strcmp(expect, "emulated") == 0 && variant.find("software tile unit") == std::string::npos) {
      std::cout << "FAILED: TESSERA_CPU_AMX=emulate should select the software tile unit, bf16 GEMM is: " << variant << "\n";
      return 1;
    }
  }
  return context.run();
}
