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
};

#if defined(__CUDACC__) && !defined(__HIPCC__)
TESSERA_DEVICE uint32_t pack2(uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16); }

/** c += a @ b on the tensor cores of sm_80+ (the launcher never picks this shape on older GPUs). */
template <class Shape, class T>
TESSERA_DEVICE void mma(float (&c)[Shape::C], const T (&a)[Shape::A], const T (&b)[Shape::B]) {
  static_assert(std::is_same_v<Shape, MmaSync16x8x16>, "CUDA builds use the mma.sync shape");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t a0 = pack2(a[0].bits, a[1].bits), a1 = pack2(a[2].bits, a[3].bits), a2 = pack2(a[4].bits, a[5].bits),
                 a3 = pack2(a[6].bits, a[7].bits), b0 = pack2(b[0].bits, b[1].bits), b1 = pack2(b[2].bits, b[3].bits);
  if constexpr (std::is_same_v<T, BFloat16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
#else
  (void)c, (void)a, (void)b;
#if defined(__CUDA_ARCH__)
  __trap();  // pre-Ampere: the host side chose the SIMT GEMM; reaching here is a dispatch bug
#endif
#endif
}
#elif defined(__HIPCC__)
/** c += a @ b on the matrix cores of CDNA GPUs (the launcher picks this shape only there). */
template <class Shape, class T>
TESSERA_DEVICE void mma(float (&c)[Shape::C], const T (&a)[Shape::A], const T (&b)[Shape::B]) {
  static_assert(std::is_same_v<Shape, Mfma16x16x16>, "HIP builds use the MFMA shape");
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
  typedef float float4_t __attribute__((ext_vector_type(4)));
  typedef short short4_t __attribute__((ext_vector_type(4)));
  typedef _Float16 half4_t __attribute__((ext_vector_type(4)));
  float4_t acc = {c[0], c[1], c[2], c[3]};
  short4_t as, bs;
  for (int i = 0; i < 4; ++i) as[i] = static_cast<short>(a[i].bits), bs[i] = static_cast<short>(b[i].bits);
  if constexpr (std::is_same_v<T, BFloat16>) {
    acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(as, bs, acc, 0, 0, 0);
  } else {
    acc = __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(half4_t, as), __builtin_bit_cast(half4_t, bs), acc, 0, 0, 0);
  }
  for (int i = 0; i < 4; ++i) c[i] = acc[i];
#else
  (void)c, (void)a, (void)b;
#if defined(__HIP_DEVICE_COMPILE__)
  __builtin_trap();  // no matrix cores (RDNA): the host side chose the SIMT GEMM
#endif
#endif
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
#endif

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
