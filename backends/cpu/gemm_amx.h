#pragma once
// bf16 x bf16 -> f32 GEMM on Intel AMX (tdpbf16ps: a 16x16 f32 tile += a 16x32 bf16 tile times
// a 32x16 bf16 tile in pairs, 16 times the multiply-adds of an AVX512_BF16 instruction).
//
// The driver (gemm_bf16.cpp, built for the baseline ISA) packs per K slab:
//  - A into panels of kMR = 32 rows, each chunk of kTileK = 32 K values stored row by row
//    ([chunk][row 0..31][32 bf16]), so a 16-row A tile is 1 KiB of contiguous 64-byte rows;
//  - B into panels of kNR = 32 columns of k-pairs, the AVX512_BF16 layout (gemm_bf16.h): per
//    pair row, columns 0-15 then 16-31, each column's pair adjacent, which is the B tile's
//    row (16 columns x a pair = 64 bytes) at a row stride of 128 bytes.
// Both panels are zero-padded to whole chunks, so a block function computes whole 32x32 tiles.
//
// The block function runs the tiles (ldtilecfg .. tilerelease) over one task's block. Two
// exist: the hardware one (gemm_amx_tiles.cpp, compiled with -mamx-tile -mamx-bf16 and
// AVX512_BF16 for the rounding, called only after mode() saw the CPU and the OS allow it) and
// a software tile unit (gemm_amx_emulated.cpp) that follows the instructions' definitions and
// faults like hardware on an unconfigured tile, so the driver, the packing and the tile
// program are tested on machines without AMX (TESSERA_CPU_AMX=emulate).
#include <cstdint>
#include <string>

namespace tessera::cpu::amx {

inline constexpr int64_t kTileK = 32;            // bf16 K values per tile row (64 bytes)
inline constexpr int64_t kMR = 32;               // rows per A panel: two 16-row tiles
inline constexpr int64_t kNR = 32;               // columns per B panel: two 16-column tiles
inline constexpr int64_t kPanel = kTileK * kMR;  // bf16 per panel and chunk (A and B alike)

enum class Mode { off, hardware, emulated };

/**
 * Chosen once per process: TESSERA_CPU_AMX=emulate runs the software tile unit;
 * TESSERA_CPU_ISA=amx demands the hardware (throws without it), avx2/avx512 turn AMX off; auto
 * (or unset) uses the hardware when cpuid lists AMX-TILE, AMX-BF16 and AVX512_BF16, XCR0 has
 * the tile state and Linux grants the process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM).
 */
Mode mode();
/** Why the hardware path is not used ("" when it is), for `tessera info`. */
std::string unavailable_reason();

/** One task's block: C[rows x cols] (+)= A_panels . B_panels over `chunks` K chunks. */
struct Block {
  int64_t rows, cols, chunks;
  const uint16_t* a;  // the first A panel of the block (panels kPanel * chunks apart)
  const uint16_t* b;  // the first B panel of the block (panels kPanel * chunks apart)
  float* c;           // f32 result or partial sums (row stride ldc); null when out is the only result
  int64_t ldc;
  bool accumulate;  // add c's values (partial sums of earlier slabs)
  uint16_t* out;    // when set, the result rounded to bf16 (nearest even) goes here, row stride ldo
  int64_t ldo;
};

void hardware_block(const Block& block);
void emulated_block(const Block& block);

}  // namespace tessera::cpu::amx
