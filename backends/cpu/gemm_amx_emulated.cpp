// The software AMX tile unit (gemm_amx.h): eight tiles of 16 rows x 64 bytes per thread,
// following the instruction definitions of Intel's ISA reference, and as strict as the
// hardware: a configuration with a bad palette, reserved bytes set or oversized tiles, a tile
// used before ldtilecfg or after tilerelease, or a tdpbf16ps whose shapes disagree throws
// where the CPU would fault. tdpbf16ps treats bf16 denormals as zero, accumulates even and odd
// pair products separately with fused multiply-adds, flushes denormal results to zero, and adds
// the two sums to the destination, as the reference pseudocode does.
#include <bit>
#include <cmath>
#include <cstring>

#include "gemm_amx_program.h"
#include "tessera/error.h"

namespace tessera::cpu::amx {
namespace {

struct TileState {
  bool configured = false;
  unsigned rows[8] = {}, colsb[8] = {};
  alignas(64) unsigned char data[8][16 * 64] = {};
};
thread_local TileState state;

[[noreturn]] void fault(const char* what) { throw Error(detail::concat("AMX emulation: ", what, " (the CPU would fault)")); }

float ftz(float x) { return std::fabs(x) < 1.17549435e-38f ? std::copysign(0.0f, x) : x; }
float bf16_daz(uint16_t bits) { return ftz(std::bit_cast<float>(static_cast<uint32_t>(bits) << 16)); }

struct EmulatedTiles {
  static void configure(const unsigned char* cfg) {
    if (cfg[0] != 1) fault("ldtilecfg with a palette other than 1");
    for (int i = 1; i < 16; ++i)
      if (cfg[i] != 0) fault("ldtilecfg with start_row or reserved bytes 2-15 set");
    for (int i = 32; i < 48; ++i)
      if (cfg[i] != 0) fault("ldtilecfg with reserved bytes 32-47 set");
    for (int i = 56; i < 64; ++i)
      if (cfg[i] != 0) fault("ldtilecfg with reserved bytes 56-63 set");
    for (int t = 0; t < 8; ++t) {
      state.colsb[t] = cfg[16 + 2 * t] | (static_cast<unsigned>(cfg[17 + 2 * t]) << 8);
      state.rows[t] = cfg[48 + t];
      if (state.colsb[t] > 64 || state.rows[t] > 16) fault("ldtilecfg with a tile over 16 rows x 64 bytes");
      if ((state.colsb[t] == 0) != (state.rows[t] == 0)) fault("ldtilecfg with a tile of zero rows or zero bytes but not both");
    }
    std::memset(state.data, 0, sizeof(state.data));
    state.configured = true;
  }
  static void check(int t, const char* op) {
    if (!state.configured) fault(detail::concat(op, " before ldtilecfg (or after tilerelease)").c_str());
    if (state.rows[t] == 0) fault(detail::concat(op, " on tile ", t, ", which the configuration leaves unused").c_str());
  }
  template <int T>
  static void zero() {
    check(T, "tilezero");
    std::memset(state.data[T], 0, sizeof(state.data[T]));
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    check(T, "tileloadd");
    std::memset(state.data[T], 0, sizeof(state.data[T]));
    for (unsigned r = 0; r < state.rows[T]; ++r)
      std::memcpy(state.data[T] + r * 64, static_cast<const unsigned char*>(p) + r * stride, state.colsb[T]);
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    check(T, "tilestored");
    for (unsigned r = 0; r < state.rows[T]; ++r)
      std::memcpy(static_cast<unsigned char*>(p) + r * stride, state.data[T] + r * 64, state.colsb[T]);
  }
  // dst (M x N f32) += src1 (M x K pairs) . src2 (K x N pairs).
  template <int C, int A, int B>
  static void dot() {
    check(C, "tdpbf16ps");
    check(A, "tdpbf16ps");
    check(B, "tdpbf16ps");
    if (C == A || C == B || A == B) fault("tdpbf16ps with a tile used twice");
    const unsigned m_rows = state.rows[C], n = state.colsb[C] / 4, k = state.colsb[A] / 4;
    if (state.rows[A] != m_rows || state.colsb[B] != state.colsb[C] || state.rows[B] != k || state.colsb[C] % 4 || state.colsb[A] % 4)
      fault("tdpbf16ps with tile shapes that do not chain (rows(A) = rows(C), colsb(B) = colsb(C), rows(B) = colsb(A) / 4)");
    for (unsigned m = 0; m < m_rows; ++m) {
      float even[16] = {}, odd[16] = {};
      const auto* a = reinterpret_cast<const uint16_t*>(state.data[A] + m * 64);
      for (unsigned p = 0; p < k; ++p) {
        const auto* b = reinterpret_cast<const uint16_t*>(state.data[B] + p * 64);
        for (unsigned q = 0; q < n; ++q) {
          even[q] = ftz(std::fma(bf16_daz(a[2 * p]), bf16_daz(b[2 * q]), even[q]));
          odd[q] = ftz(std::fma(bf16_daz(a[2 * p + 1]), bf16_daz(b[2 * q + 1]), odd[q]));
        }
      }
      auto* c = reinterpret_cast<float*>(state.data[C] + m * 64);
      for (unsigned q = 0; q < n; ++q) c[q] = ftz(c[q] + ftz(even[q] + odd[q]));
    }
  }
  static void release() {
    state.configured = false;
    std::memset(state.data, 0, sizeof(state.data));
  }
  // vcvtneps2bf16: round to nearest even, NaN kept quiet.
  static void to_bf16(const float* src, uint16_t* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t u = std::bit_cast<uint32_t>(src[i]);
      dst[i] = std::isnan(src[i]) ? static_cast<uint16_t>((u >> 16) | 0x40) : static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    }
  }
};

}  // namespace

void emulated_block(const Block& block) {
  try {
    run_block<EmulatedTiles>(block);
  } catch (...) {
    state.configured = false;  // a faulting program leaves no configuration behind
    throw;
  }
}

}  // namespace tessera::cpu::amx
