#pragma once
// The AMX tile program of one block (gemm_amx.h), written once over a tile unit `Tiles`: the
// hardware's intrinsics (gemm_amx_tiles.cpp) or the software unit (gemm_amx_emulated.cpp).
// Only a template: each file instantiates it on its own unit (in an unnamed namespace), so the
// hardware instantiation's AMX and AVX-512 code can never be merged into baseline code.
//
// Tiles 0-3 hold the 32x32 f32 C block (rows 0-15 / 16-31 x columns 0-15 / 16-31), 4-5 the
// two A tiles of a chunk, 6-7 the two B tiles; all are 16 rows of 64 bytes.
#include "gemm_amx.h"

namespace tessera::cpu::amx {

template <class Tiles>
void run_block(const Block& g) {
  // Palette 1, tiles 0-7 each 16 rows of 64 bytes, the rest reserved (zero). The configuration
  // is per thread and another library (oneDNN) may have loaded its own, so each block loads ours.
  alignas(64) unsigned char cfg[64] = {};
  cfg[0] = 1;
  for (int t = 0; t < 8; ++t) {
    cfg[16 + 2 * t] = 64;
    cfg[48 + t] = 16;
  }
  Tiles::configure(cfg);
  alignas(64) float buf[kMR * kNR];
  const int64_t panel = kPanel * g.chunks;
  for (int64_t j = 0; j < g.cols; j += kNR) {
    const uint16_t* bp = g.b + (j / kNR) * panel;
    const int64_t cols = g.cols - j < kNR ? g.cols - j : kNR;
    for (int64_t i = 0; i < g.rows; i += kMR) {
      const uint16_t* ap = g.a + (i / kMR) * panel;
      const int64_t rows = g.rows - i < kMR ? g.rows - i : kMR;
      float* ct = g.c ? g.c + i * g.ldc + j : nullptr;
      // A whole f32 tile is loaded and stored in place; an edge tile or a bf16 result goes
      // through the local buffer.
      const bool in_place = ct && !g.out && rows == kMR && cols == kNR;
      float* dst = in_place ? ct : buf;
      const int64_t ld = in_place ? g.ldc : kNR;
      if (g.accumulate) {
        if (!in_place) {
          for (int64_t r = 0; r < kMR; ++r)
            for (int64_t q = 0; q < kNR; ++q) buf[r * kNR + q] = r < rows && q < cols ? ct[r * g.ldc + q] : 0.0f;
        }
        Tiles::template load<0>(dst, ld * 4);
        Tiles::template load<1>(dst + 16, ld * 4);
        Tiles::template load<2>(dst + 16 * ld, ld * 4);
        Tiles::template load<3>(dst + 16 * ld + 16, ld * 4);
      } else {
        Tiles::template zero<0>();
        Tiles::template zero<1>();
        Tiles::template zero<2>();
        Tiles::template zero<3>();
      }
      for (int64_t c = 0; c < g.chunks; ++c) {
        const uint16_t *at = ap + c * kPanel, *bt = bp + c * kPanel;
        Tiles::template load<4>(at, 64);
        Tiles::template load<5>(at + 16 * kTileK, 64);
        Tiles::template load<6>(bt, 128);
        Tiles::template load<7>(bt + 32, 128);
        Tiles::template dot<0, 4, 6>();
        Tiles::template dot<1, 4, 7>();
        Tiles::template dot<2, 5, 6>();
        Tiles::template dot<3, 5, 7>();
      }
      Tiles::template store<0>(dst, ld * 4);
      Tiles::template store<1>(dst + 16, ld * 4);
      Tiles::template store<2>(dst + 16 * ld, ld * 4);
      Tiles::template store<3>(dst + 16 * ld + 16, ld * 4);
      if (in_place) continue;
      for (int64_t r = 0; r < rows; ++r) {
        if (g.out) {
          Tiles::to_bf16(buf + r * kNR, g.out + (i + r) * g.ldo + j, cols);
        } else {
          for (int64_t q = 0; q < cols; ++q) ct[r * g.ldc + q] = buf[r * kNR + q];
        }
      }
    }
  }
  Tiles::release();
}

}  // namespace tessera::cpu::amx
