// Properties of the 16-bit float types over all 65536 bit patterns, dtype promotion, and the
// Philox4x32-10 known-answer vectors from the Random123 distribution.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "tessera/dtype.h"
#include "tessera/kernels/convert.h"
#include "tessera/kernels/philox.h"

using namespace tessera;

namespace {
double exact_value_half(uint16_t h) {  // decodes binary16 by definition, not by the code under test
  const int sign = (h >> 15) ? -1 : 1, e = (h >> 10) & 31, m = h & 1023;
  if (e == 0) return sign * std::ldexp(m, -24);
  if (e == 31) return m ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024 + m, e - 25);
}
double exact_value_bf16(uint16_t b) {
  const int sign = (b >> 15) ? -1 : 1, e = (b >> 7) & 255, m = b & 127;
  if (e == 0) return sign * std::ldexp(m, -133);
  if (e == 255) return m ? NAN : sign * INFINITY;
  return sign * std::ldexp(128 + m, e - 134);
}
}  // namespace

TEST_CASE("f16: every bit pattern decodes exactly and round-trips") {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const Half h = Half::from_bits(static_cast<uint16_t>(bits));
    const float f = static_cast<float>(h);
    const double want = exact_value_half(static_cast<uint16_t>(bits));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f));
      REQUIRE(std::isnan(static_cast<float>(Half(f))));
      REQUIRE((Half(f).bits & 0x7c00) == 0x7c00);
      continue;
    }
    REQUIRE(static_cast<double>(f) == want);
    REQUIRE(Half(f).bits == bits);
  }
}

TEST_CASE("f16: midpoints round to even, just-above rounds up, overflow goes to infinity") {
  // For consecutive finite positive halves a < b, the float midpoint must round to the one with
  // an even mantissa, and the next float above the midpoint to b.
  for (uint32_t bits = 0; bits < 0x7bff; ++bits) {
    const double a = exact_value_half(static_cast<uint16_t>(bits)), b = exact_value_half(static_cast<uint16_t>(bits + 1));
    const float mid = static_cast<float>((a + b) / 2);  // exact in float
    REQUIRE(static_cast<double>(mid) == (a + b) / 2);
    const uint16_t even = (bits & 1) ? static_cast<uint16_t>(bits + 1) : static_cast<uint16_t>(bits);
    REQUIRE(Half(mid).bits == even);
    REQUIRE(Half(std::nextafter(mid, INFINITY)).bits == bits + 1);
    REQUIRE(Half(std::nextafter(mid, 0.0f)).bits == bits);
    REQUIRE(Half(-mid).bits == (even | 0x8000));
  }
  CHECK(Half(65504.0f).bits == 0x7bff);
  CHECK(Half(65519.99f).bits == 0x7bff);
  CHECK(Half(65520.0f).bits == 0x7c00);
  CHECK(Half(1e10f).bits == 0x7c00);
  CHECK(Half(-INFINITY).bits == 0xfc00);
  CHECK(Half(std::ldexp(1.0f, -25)).bits == 0);        // exactly half the smallest subnormal: to even (0)
  CHECK(Half(std::ldexp(1.5f, -25)).bits == 1);
  CHECK(Half(1e-30f).bits == 0);
}

TEST_CASE("bf16: every bit pattern decodes exactly, round-trips, and rounds to nearest even") {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const BFloat16 b = BFloat16::from_bits(static_cast<uint16_t>(bits));
    const float f = static_cast<float>(b);
    const double want = exact_value_bf16(static_cast<uint16_t>(bits));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f));
      REQUIRE(std::isnan(static_cast<float>(BFloat16(f))));
      continue;
    }
    REQUIRE(static_cast<double>(f) == want);
    REQUIRE(BFloat16(f).bits == bits);
    if ((bits & 0x7fff) < 0x7f7f) {
      const double next = exact_value_bf16(static_cast<uint16_t>(bits + 1));
      const float mid = static_cast<float>((want + next) / 2);
      const uint16_t even = (bits & 1) ? static_cast<uint16_t>(bits + 1) : static_cast<uint16_t>(bits);
      REQUIRE(BFloat16(mid).bits == even);
    }
  }
}

TEST_CASE("conversions: f64 -> f16 is correctly rounded, float -> int saturates, NaN -> 0") {
  // 1 + 2^-11 + 2^-40 is just above a f16 midpoint; a naive double rounding would tie to even.
  const double just_above = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  CHECK(kernels::convert<Half, double>(just_above).bits == 0x3c01);
  CHECK(kernels::convert<int8_t, float>(300.0f) == 127);
  CHECK(kernels::convert<int8_t, float>(-300.0f) == -128);
  CHECK(kernels::convert<uint8_t, double>(-1.0) == 0);
  CHECK(kernels::convert<int32_t, float>(NAN) == 0);
  CHECK(kernels::convert<int64_t, double>(1e300) == INT64_MAX);
  CHECK(kernels::convert<bool, float>(NAN) == true);
  CHECK(kernels::convert<int8_t, int32_t>(257) == 1);  // integer narrowing wraps
}

TEST_CASE("type promotion follows PyTorch") {
  CHECK(promote_types(DType::f16, DType::bf16) == DType::f32);
  CHECK(promote_types(DType::i64, DType::f16) == DType::f16);
  CHECK(promote_types(DType::u8, DType::i8) == DType::i32);
  CHECK(promote_types(DType::boolean, DType::u8) == DType::u8);
  CHECK(promote_types(DType::i32, DType::i64) == DType::i64);
  CHECK(promote_types(DType::f32, DType::f64) == DType::f64);
  CHECK(promote_types(DType::boolean, DType::boolean) == DType::boolean);
  for (int a = 0; a < kNumDTypes; ++a) {
    for (int b = 0; b < kNumDTypes; ++b) {
      REQUIRE(promote_types(static_cast<DType>(a), static_cast<DType>(b)) ==
              promote_types(static_cast<DType>(b), static_cast<DType>(a)));
    }
  }
  CHECK(parse_dtype("bf16") == DType::bf16);
  CHECK(std::string(dtype_name(DType::boolean)) == "bool");
}

TEST_CASE("Philox4x32-10 matches the Random123 known-answer vectors") {
  struct Kat {
    kernels::Philox4 ctr;
    uint32_t k0, k1;
    kernels::Philox4 want;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& k : kats) {
    const kernels::Philox4 got = kernels::philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) CHECK(got.v[i] == k.want.v[i]);
  }
}
