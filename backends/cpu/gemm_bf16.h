#pragma once
// bf16 x bf16 -> f32 GEMM on AVX512_BF16 (vdpbf16ps: 16 lanes x a pair of products per
// instruction, twice the multiply-adds of an f32 FMA). Chosen at run time from cpuid; the
// micro-kernel lives in its own translation unit compiled for AVX-512 (gemm_bf16_avx512.cpp)
// and holds no inline or template code shared with other files, so no AVX-512 instruction can
// leak into code that runs on AVX2-only CPUs.
#include <cstdint>

namespace tessera::cpu::bf16 {

inline constexpr int64_t kMR = 12;   // micro-tile rows (broadcast pairs of A)
inline constexpr int64_t kNR = 32;   // micro-tile columns (two 16-lane vectors)
// K elements per slab (even). 1024 (a 64 KiB B panel, from L2) beat 512 (32 KiB, L1-sized)
// and 256 on Zen 4: 1024^3 at 0.98x oneDNN vs 0.91x and 0.86x (fewer C reloads and fork-joins).
inline constexpr int64_t kKC = 1024;

/** True when this build has the AVX512_BF16 kernel and the running CPU executes it. */
bool available();

/**
 * One kMR x kNR tile over `kpairs` pairs of K: acc = A_panel . B_panel (+ c when accumulate).
 * With out == nullptr acc is stored to c (f32, row stride ldc); otherwise it is rounded to bf16
 * (round to nearest even, vcvtneps2bf16) into out (row stride ldo) and c is only read.
 * a: kpairs x kMR 32-bit words, each two bf16 (k even in the low half); b: kpairs x 64 bf16,
 * columns 0-15 then 16-31, each column's k-pair adjacent.
 */
void micro_kernel(int64_t kpairs, const uint32_t* a, const uint16_t* b, float* c, int64_t ldc, bool accumulate, uint16_t* out,
                  int64_t ldo);

}  // namespace tessera::cpu::bf16
