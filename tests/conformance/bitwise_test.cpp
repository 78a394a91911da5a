// Bitwise ops (and, or, xor, shifts, not) on every integer dtype and bool, every layout and
// broadcast, against a host reference in int64 truncated to the dtype's width.
#include <cstdint>
#include <functional>

#include "support/checks.h"

using namespace tessera;
using namespace tessera::test;

namespace {
using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

// Two's-complement truncation of v to the width of dt (sign-extended for the signed dtypes).
int64_t wrap_to(DType dt, int64_t v) {
  switch (dt) {
    case DType::i8: return static_cast<int8_t>(static_cast<uint8_t>(v & 0xff));
    case DType::u8: return v & 0xff;
    case DType::i32: return static_cast<int32_t>(static_cast<uint32_t>(v & 0xffffffff));
    case DType::boolean: return v != 0;
    default: return v;
  }
}
int bits_of(DType dt) { return static_cast<int>(8 * itemsize(dt)); }

int64_t shift_ref(DType dt, int64_t a, int64_t b, bool left) {
  const int bits = bits_of(dt);
  if (left) return b < 0 || b >= bits ? 0 : wrap_to(dt, static_cast<int64_t>(static_cast<uint64_t>(a) << b));
  if (b < 0 || b >= bits) return a < 0 ? -1 : 0;
  return a >> b;  // a is already sign-extended (or non-negative for u8)
}

std::vector<int64_t> values(const Tensor& t) { return t.to(kCPU).to(DType::i64).contiguous().to_vector<int64_t>(); }

// The reference of one broadcast binary op, element by element on host copies.
std::vector<int64_t> reference(const Tensor& a, const Tensor& b, const Shape& shape, const std::function<int64_t(int64_t, int64_t)>& f) {
  const std::vector<int64_t> va = values(a.expand(shape)), vb = values(b.expand(shape));
  std::vector<int64_t> out(va.size());
  for (size_t i = 0; i < va.size(); ++i) out[i] = f(va[i], vb[i]);
  return out;
}
}  // namespace

TEST_CASE("bitwise and, or, xor and shifts match the reference on every integer dtype, layout and broadcast") {
  const std::pair<Shape, Shape> shapes[] = {{{4, 5}, {4, 5}}, {{3, 1, 5}, {1, 4, 1}}, {{6}, {}}, {{0, 3}, {3}}};
  uint64_t seed = 4000;
  for (DType dt : kIntTypes) {
    const int bits = bits_of(dt);
    // Values spanning the dtype (not just small ones, so high bits and signs are exercised).
    const double lo = dt == DType::u8 ? 0 : -std::ldexp(1.0, std::min(bits, 53) - 2), hi = -lo + (dt == DType::u8 ? 255 : 0);
    for (const auto& [sa, sb] : shapes) {
      for (Layout layout : kLayouts) {
        CAPTURE(dtype_name(dt));
        CAPTURE(shape_str(sa));
        CAPTURE(layout_name(layout));
        const Tensor a = make_input(sa, dt, ++seed, lo, hi, layout);
        const Tensor b = make_input(sb, dt, ++seed, lo, hi);
        // Shift counts from -2 to bits + 2: both out-of-range sides and every in-range count.
        const Tensor n = make_input(sb, dt, ++seed, dt == DType::u8 ? 0 : -2, bits + 2);
        const Shape shape = broadcast_shapes(sa, sb, "test");
        const struct {
          const char* name;
          BinaryFn fn;
          Tensor rhs;
          std::function<int64_t(int64_t, int64_t)> ref;
        } cases[] = {
            {"bitwise_and", &bitwise_and, b, [](int64_t x, int64_t y) { return x & y; }},
            {"bitwise_or", &bitwise_or, b, [](int64_t x, int64_t y) { return x | y; }},
            {"bitwise_xor", &bitwise_xor, b, [](int64_t x, int64_t y) { return x ^ y; }},
            {"bitwise_left_shift", &bitwise_left_shift, n, [dt](int64_t x, int64_t y) { return shift_ref(dt, x, y, true); }},
            {"bitwise_right_shift", &bitwise_right_shift, n, [dt](int64_t x, int64_t y) { return shift_ref(dt, x, y, false); }},
        };
        for (const auto& c : cases) {
          CAPTURE(c.name);
          const Tensor y = c.fn(a, c.rhs);
          CHECK(y.dtype() == dt);
          CHECK(y.device() == device());
          REQUIRE(y.shape() == shape);
          std::vector<int64_t> want = reference(a, c.rhs, shape, c.ref);
          for (int64_t& w : want) w = wrap_to(dt, w);
          CHECK(values(y) == want);
        }
        std::vector<int64_t> flipped = values(a);
        for (int64_t& v : flipped) v = wrap_to(dt, ~v);
        CHECK(values(bitwise_not(a)) == flipped);
      }
    }
  }
}

TEST_CASE("bitwise ops on bool, Python's operators, promotion and the errors") {
  const Tensor p = from_vector<bool>({true, true, false, false}, {4}).to(device());
  const Tensor q = from_vector<bool>({true, false, true, false}, {4}).to(device());
  CHECK((p & q).to_vector<bool>() == std::vector<bool>{true, false, false, false});
  CHECK((p | q).to_vector<bool>() == std::vector<bool>{true, true, true, false});
  CHECK((p ^ q).to_vector<bool>() == std::vector<bool>{false, true, true, false});
  CHECK((~p).to_vector<bool>() == std::vector<bool>{false, false, true, true});
  CHECK((p & q).dtype() == DType::boolean);

  const Tensor i = from_vector<int32_t>({1, -8, 12, 255}, {4}).to(device());
  CHECK((i << 2).to_vector<int32_t>() == std::vector<int32_t>{4, -32, 48, 1020});
  CHECK((i >> 2).to_vector<int32_t>() == std::vector<int32_t>{0, -2, 3, 63});
  CHECK((1 << i.narrow(0, 2, 1)).to_vector<int32_t>() == std::vector<int32_t>{4096});
  CHECK((i & 0xF0).to_vector<int32_t>() == std::vector<int32_t>{0, 0xF0 & -8, 0, 0xF0});
  // Mixed dtypes promote like arithmetic: u8 | i32 is i32; bool & i64 is i64.
  const Tensor u = from_vector<uint8_t>({0x0F, 0xF0, 0xFF, 0}, {4}).to(device());
  CHECK((u | i).dtype() == DType::i32);
  CHECK((u | i).to_vector<int32_t>() == std::vector<int32_t>{0x0F, -8, 0xFF, 0xFF});
  CHECK((p & i.to(DType::i64)).dtype() == DType::i64);
  CHECK((~u).to_vector<uint8_t>() == std::vector<uint8_t>{0xF0, 0x0F, 0, 0xFF});

  const Tensor f = from_vector<float>({1, 2}, {2}).to(device());
  TESSERA_CHECK_THROWS_WITH(bitwise_and(f, f), "bitwise_and: needs integer or bool operands, got float32 and float32");
  TESSERA_CHECK_THROWS_WITH(i | 1.5, "bitwise_or: needs integer or bool operands");
  TESSERA_CHECK_THROWS_WITH(p << p, "bitwise_left_shift: not supported for dtype bool");
  TESSERA_CHECK_THROWS_WITH(~f, "bitwise_not: needs an integer or bool tensor, got float32");
}

TEST_CASE("comparison operators give bool tensors, as libtorch's (a > 2.0 is gt(a, 2.0))") {
  const Tensor a = from_vector<float>({1, 2, 3, NAN}, {4}).to(device()), b = from_vector<float>({3, 2, 1, 0}, {4}).to(device());
  const auto bits = [](const Tensor& t) {
    CHECK(t.dtype() == DType::boolean);
    return t.to(DType::i64).to_vector<int64_t>();
  };
  CHECK(bits(a > 2.0) == std::vector<int64_t>{0, 0, 1, 0});
  CHECK(bits(a >= 2) == std::vector<int64_t>{0, 1, 1, 0});
  CHECK(bits(a < b) == std::vector<int64_t>{1, 0, 0, 0});
  CHECK(bits(a <= b) == std::vector<int64_t>{1, 1, 0, 0});
  CHECK(bits(a == b) == std::vector<int64_t>{0, 1, 0, 0});
  CHECK(bits(a != b) == std::vector<int64_t>{1, 0, 1, 1});  // NaN != anything
  CHECK(bits(2.0 < a) == std::vector<int64_t>{0, 0, 1, 0});
  CHECK(bits(a == a) == std::vector<int64_t>{1, 1, 1, 0});  // values, not identity (is_same)
}
