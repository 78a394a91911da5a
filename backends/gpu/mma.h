#pragma once
// Portable warp-level matrix multiply-accumulate: D (f32) += A (f16/bf16) @ B (f16/bf16) over one
// warp, with the fragment ownership of the hardware instruction it maps to:
//   MmaSync16x8x16  NVIDIA mma.sync.m16n8k16 (sm_80+), 32-lane warps
//   Mfma16x16x16    AMD v_mfma_f32_16x16x16{f16,bf16_1k} (CDNA: gfx90a, gfx94x), 64-lane wavefronts
// A shape says which element of A, B and C each lane holds (its *_row / *_col maps); a kernel
// loads its fragments through those maps and calls mma(). On the emulated backend mma() is a
// warp-collective reference that gathers every lane's registers and rebuilds the tiles through
// the same maps, so a kernel that loads the wrong elements into a lane computes a wrong product
// in CI, as it would on the tensor cores.
#include "runtime.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {

struct MmaSync16x8x16 {
  static constexpr int M = 16, N = 8, K = 16, Warp = 32;
  static constexpr int A = 8, B = 4, C = 4;  // elements per lane
  // groupID = lane / 4, threadID_in_group = lane % 4 (PTX ISA, "Matrix Fragments for mma.m16n8k16").
  static TESSERA_DEVICE int a_row(int lane, int i) { return lane / 4 + 8 * ((i >> 1) & 1); }
  static TESSERA_DEVICE int a_col(int lane, int i) { return (lane % 4) * 2 + (i & 1) + 8 * (i >> 2); }
  static TESSERA_DEVICE int b_row(int lane, int i) { return (lane % 4) * 2 + (i & 1) + 8 * (i >> 1); }
  static TESSERA_DEVICE int b_col(int lane, int) { return lane / 4; }
  static TESSERA_DEVICE int c_row(int lane, int i) { return lane / 4 + 8 * (i >> 1); }
  static TESSERA_DEVICE int c_col(int lane, int i) { return (lane % 4) * 2 + (i & 1); }
  // Row-wise work on accumulators (attention's softmax): a lane holds rows c_row(lane, e) for
  // kRowSlots distinct rows (slot(e) says which), the kRowLanes lanes that differ only in the low
  // bits of the lane index hold the rest of each row. kCIsA: the C fragments of two adjacent
  // N-tiles are, element for element, the A fragment of one K-step (A element i of K-step kk is C
  // element i & 3 of N-tile 2 kk + i / 4), so a product can feed the next MMA from registers.
  static constexpr int kRowSlots = 2, kRowLanes = 4;
  static constexpr bool kCIsA = true;
  static TESSERA_DEVICE int slot(int i) { return i >> 1; }
  static TESSERA_DEVICE int c_tile_for_a(int kk, int i) { return 2 * kk + i / 4; }
  static TESSERA_DEVICE int c_elem_for_a(int i) { return i & 3; }
};

struct Mfma16x16x16 {
  static constexpr int M = 16, N = 16, K = 16, Warp = 64;
  static constexpr int A = 4, B = 4, C = 4;
  // AMD matrix instruction calculator, v_mfma_f32_16x16x16f16: lanes 16 apart hold the next 4 k.
  static TESSERA_DEVICE int a_row(int lane, int) { return lane % 16; }
  static TESSERA_DEVICE int a_col(int lane, int i) { return 4 * (lane / 16) + i; }
  static TESSERA_DEVICE int b_row(int lane, int i) { return 4 * (lane / 16) + i; }
  static TESSERA_DEVICE int b_col(int lane, int) { return lane % 16; }
  static TESSERA_DEVICE int c_row(int lane, int i) { return 4 * (lane / 16) + i; }
  static TESSERA_DEVICE int c_col(int lane, int) { return lane % 16; }
  // C is the transpose of A's layout here: products go through shared memory to feed an MMA.
  static constexpr int kRowSlots = 4, kRowLanes = 16;
  static constexpr bool kCIsA = false;
  static TESSERA_DEVICE int slot(int i) { return i; }
};

/** Two 16-bit operand elements as one register word (the lower index in the low half). */
TESSERA_DEVICE uint32_t pack_bits(uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16); }

/** Two floats rounded to nearest-even T and packed as an operand word (one cvt on sm_80+). */
template <class T>
TESSERA_DEVICE uint32_t pack_rn(float lo, float hi) {
  if constexpr (kHasMmaSync) return cvt_pack2_rn<std::is_same_v<T, BFloat16>>(lo, hi);
  return pack_bits(T(lo).bits, T(hi).bits);
}

/** A fragment of N 16-bit elements from N / 2 packed words. */
template <class T, int N>
TESSERA_DEVICE void unpack_words(const uint32_t (&w)[N / 2], T (&out)[N]) {
  for (int i = 0; i < N / 2; ++i) {
    out[2 * i] = T::from_bits(static_cast<uint16_t>(w[i] & 0xffffu));
    out[2 * i + 1] = T::from_bits(static_cast<uint16_t>(w[i] >> 16));
  }
}

#if defined(__CUDACC__) && !defined(__HIPCC__)
/** c += a @ b on the tensor cores of sm_80+ (the launcher never picks this shape on older GPUs:
 *  there mma_sync_16x8x16 traps, a dispatch bug). */
template <class Shape, class T>
TESSERA_DEVICE void mma(float (&c)[Shape::C], const T (&a)[Shape::A], const T (&b)[Shape::B]) {
  static_assert(std::is_same_v<Shape, MmaSync16x8x16>, "CUDA builds use the mma.sync shape");
  const uint32_t aw[4] = {pack_bits(a[0].bits, a[1].bits), pack_bits(a[2].bits, a[3].bits), pack_bits(a[4].bits, a[5].bits),
                          pack_bits(a[6].bits, a[7].bits)};
  const uint32_t bw[2] = {pack_bits(b[0].bits, b[1].bits), pack_bits(b[2].bits, b[3].bits)};
  mma_sync_16x8x16<std::is_same_v<T, BFloat16>>(c, aw, bw);
}
/** mma() on packed operand words (fragments kept as words use half the registers). */
template <class Shape, class T>
TESSERA_DEVICE void mma_w(float (&c)[Shape::C], const uint32_t (&a)[Shape::A / 2], const uint32_t (&b)[Shape::B / 2]) {
  if constexpr (kHasMmaSync) {
    mma_sync_16x8x16<std::is_same_v<T, BFloat16>>(c, a, b);
  } else {
    T ta[Shape::A], tb[Shape::B];
    unpack_words<T, Shape::A>(a, ta);
    unpack_words<T, Shape::B>(b, tb);
    mma<Shape, T>(c, ta, tb);
  }
}
#elif defined(__HIPCC__)
/** c += a @ b on the matrix cores of CDNA GPUs (the launcher picks this shape only there). */
template <class Shape, class T>
TESSERA_DEVICE void mma(float (&c)[Shape::C], const T (&a)[Shape::A], const T (&b)[Shape::B]) {
  static_assert(std::is_same_v<Shape, Mfma16x16x16>, "HIP builds use the MFMA shape");
  const uint16_t ab[4] = {a[0].bits, a[1].bits, a[2].bits, a[3].bits}, bb[4] = {b[0].bits, b[1].bits, b[2].bits, b[3].bits};
  mfma_16x16x16<std::is_same_v<T, BFloat16>>(c, ab, bb);
}
template <class Shape, class T>
TESSERA_DEVICE void mma_w(float (&c)[Shape::C], const uint32_t (&a)[Shape::A / 2], const uint32_t (&b)[Shape::B / 2]) {
  T ta[Shape::A], tb[Shape::B];
  unpack_words<T, Shape::A>(a, ta);
  unpack_words<T, Shape::B>(b, tb);
  mma<Shape, T>(c, ta, tb);
}
#else
/**
 * Emulated tensor-core MMA: the warp's A and B registers are gathered (one warp-collective
 * rendezvous per 64-bit word, so every lane must take part, as with mma.sync), the tiles are
 * rebuilt through the shape's ownership maps, and each lane computes its own C elements in f32.
 */
template <class Shape, class T>
void mma(float (&c)[Shape::C], const T (&a)[Shape::A], const T (&b)[Shape::B],
         std::source_location where = std::source_location::current()) {
  if (warp_size() != Shape::Warp) {
    throw Error("emulated: a " + std::to_string(Shape::M) + "x" + std::to_string(Shape::N) + "x" + std::to_string(Shape::K) +
                " MMA shape needs " + std::to_string(Shape::Warp) + "-lane warps, the emulator runs " +
                std::to_string(warp_size()));
  }
  constexpr int kWordsA = (Shape::A + 3) / 4, kWordsB = (Shape::B + 3) / 4;  // four 16-bit elements per word
  uint64_t words[kWordsA + kWordsB][Shape::Warp];
  for (int w = 0; w < kWordsA + kWordsB; ++w) {
    uint64_t mine = 0;
    for (int e = 0; e < 4; ++e) {
      const int i = w < kWordsA ? 4 * w + e : 4 * (w - kWordsA) + e;
      const int count = w < kWordsA ? Shape::A : Shape::B;
      if (i < count) mine |= static_cast<uint64_t>(w < kWordsA ? a[i].bits : b[i].bits) << (16 * e);
    }
    emu::warp_gather(mine, words[w], where);
  }
  float ta[Shape::M][Shape::K], tb[Shape::K][Shape::N];
  for (int l = 0; l < Shape::Warp; ++l) {
    for (int i = 0; i < Shape::A; ++i) {
      ta[Shape::a_row(l, i)][Shape::a_col(l, i)] = static_cast<float>(T::from_bits(static_cast<uint16_t>(words[i / 4][l] >> (16 * (i % 4)))));
    }
    for (int i = 0; i < Shape::B; ++i) {
      tb[Shape::b_row(l, i)][Shape::b_col(l, i)] =
          static_cast<float>(T::from_bits(static_cast<uint16_t>(words[kWordsA + i / 4][l] >> (16 * (i % 4)))));
    }
  }
  const int me = lane();
  for (int i = 0; i < Shape::C; ++i) {
    const int r = Shape::c_row(me, i), col = Shape::c_col(me, i);
    float acc = c[i];
    for (int k = 0; k < Shape::K; ++k) acc = std::fma(ta[r][k], tb[k][col], acc);
    c[i] = acc;
  }
}
template <class Shape, class T>
void mma_w(float (&c)[Shape::C], const uint32_t (&a)[Shape::A / 2], const uint32_t (&b)[Shape::B / 2],
           std::source_location where = std::source_location::current()) {
  T ta[Shape::A], tb[Shape::B];
  unpack_words<T, Shape::A>(a, ta);
  unpack_words<T, Shape::B>(b, tb);
  mma<Shape, T>(c, ta, tb, where);
}
#endif

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
