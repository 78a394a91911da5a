// Winograd F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks",
// 2015): Y = A^T [ (G g G^T) . (B^T d B) ] A per 2x2 output tile, the elementwise product
// summed over input channels as 16 GEMMs. Tiles are processed in blocks small enough that the
// transformed patches V [16][C][tb] and products M [16][O][tb] stay in L2: one block is
// transformed, multiplied and written out before the next, so nothing of size N x tiles ever
// goes through memory (im2col writes and reads 9 x the input).
#include "conv_winograd.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#if defined(TESSERA_CPU_AVX512)
#include <immintrin.h>
#endif

#include "cpu_backend.h"
#include "gemm.h"

TESSERA_CPU_KERNELS_BEGIN
namespace {

// U[e][o][c] = (G g G^T)[e] for each (o, c), G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].
void transform_weights(const Winograd3x3& a, float* u) {
  for (int64_t o = 0; o < a.o; ++o) {
    for (int64_t c = 0; c < a.c; ++c) {
      float g[3][3];
      for (int ki = 0; ki < 3; ++ki) {
        for (int kj = 0; kj < 3; ++kj) {
          g[ki][kj] = a.flip_transpose ? a.weight[((c * a.o + o) * 3 + (2 - ki)) * 3 + (2 - kj)] : a.weight[((o * a.c + c) * 3 + ki) * 3 + kj];
        }
      }
      float gg[4][3];  // G g
      for (int j = 0; j < 3; ++j) {
        gg[0][j] = g[0][j];
        gg[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);
        gg[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]);
        gg[3][j] = g[2][j];
      }
      for (int i = 0; i < 4; ++i) {  // (G g) G^T
        const float r[4] = {gg[i][0], 0.5f * (gg[i][0] + gg[i][1] + gg[i][2]), 0.5f * (gg[i][0] - gg[i][1] + gg[i][2]), gg[i][2]};
        for (int j = 0; j < 4; ++j) u[((i * 4 + j) * a.o + o) * a.c + c] = r[j];
      }
    }
  }
}

// Floats between the 16 transformed operands (V[e], M[e], the gradient's W[e]) of a block:
// rows x tb plus one cache line. Unpadded, the stride was a multiple of 4 KiB for the CNN's
// layers (32 x 160 x 4 B = 5 x 4 KiB), so the 16 streams that the transforms write and read in
// step all fell in one L1 set (12 ways) and evicted each other.
constexpr int64_t e_stride(int64_t rows, int64_t tb) { return rows * tb + 16; }

struct TileBlock {
  int64_t count = 0;                          // tiles in this block
  std::vector<int64_t> img, y0, x0;           // per tile: sample and the patch's top-left input position
  // Runs of consecutive tiles in one tile row of one sample: [first, first + len) of the block.
  struct Run {
    int64_t first, len;
  };
  std::vector<Run> runs;
};

#if !defined(TESSERA_CPU_AVX512)  // the AVX-512 kernels gather and transform in registers (below)
// Patches of channel c for every tile of the block: patch[k][t], k = 4 * row + col. By runs
// of tiles along a row: each input row is copied once into a zero-padded line, then every patch
// column is a stride-2 walk over that line (no bounds checks; the compiler vectorises it).
// Tile by tile, 16 scalar loads and checks per tile took a fifth of the convolution.
void gather_patches(const Winograd3x3& a, const TileBlock& b, int64_t c, int64_t tb, float* __restrict patch, float* __restrict line) {
  for (const TileBlock::Run& run : b.runs) {
    const int64_t t0 = run.first, n = run.len, x0 = b.x0[t0];
    const float* plane = a.x + (b.img[t0] * a.c + c) * a.h * a.w;
    const int64_t width = 2 * n + 2;  // the line covers input columns [x0, x0 + width)
    for (int r = 0; r < 4; ++r) {
      const int64_t y = b.y0[t0] + r;
      if (y < 0 || y >= a.h) {
        for (int q = 0; q < 4; ++q) std::fill(patch + (r * 4 + q) * tb + t0, patch + (r * 4 + q) * tb + t0 + n, 0.0f);
        continue;
      }
      const float* row = plane + y * a.w;
      for (int64_t j = 0; j < width; ++j) {
        const int64_t x = x0 + j;
        line[j] = (x >= 0 && x < a.w) ? row[x] : 0.0f;
      }
      for (int q = 0; q < 4; ++q) {
        float* dst = patch + (r * 4 + q) * tb + t0;
        for (int64_t i = 0; i < n; ++i) dst[i] = line[2 * i + q];
      }
    }
  }
}

// o0 = a0 - a2, o1 = a1 + a2, o2 = a2 - a1, o3 = a1 - a3 over n lanes: one stage of B^T d B.
// Whole arrays at a time (vectorised over tiles): transforming tile by tile wrote 16 values
// 8 KiB apart per tile, all in one L1 set, and took 3x the GEMMs' time.
inline void input_stage(const float* __restrict a0, const float* __restrict a1, const float* __restrict a2, const float* __restrict a3,
                        float* __restrict o0, float* __restrict o1, float* __restrict o2, float* __restrict o3, int64_t n) {
  for (int64_t t = 0; t < n; ++t) {
    o0[t] = a0[t] - a2[t], o1[t] = a1[t] + a2[t], o2[t] = a2[t] - a1[t], o3[t] = a1[t] - a3[t];
  }
}

// V[e][c][t] = (B^T d B)[e], B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], via bd = B^T d.
void transform_patches(const float* d, float* bd, int64_t tb, int64_t count, int64_t channels, int64_t c, float* v) {
  const auto in = [&](const float* base, int row, int col) { return base + (row * 4 + col) * tb; };
  const auto out = [&](float* base, int row, int col) { return base + (row * 4 + col) * tb; };
  for (int q = 0; q < 4; ++q) {
    input_stage(in(d, 0, q), in(d, 1, q), in(d, 2, q), in(d, 3, q), out(bd, 0, q), out(bd, 1, q), out(bd, 2, q), out(bd, 3, q), count);
  }
  const int64_t vs = e_stride(channels, tb);
  const auto ve = [&](int i, int j) { return v + (i * 4 + j) * vs + c * tb; };
  for (int i = 0; i < 4; ++i) input_stage(in(bd, i, 0), in(bd, i, 1), in(bd, i, 2), in(bd, i, 3), ve(i, 0), ve(i, 1), ve(i, 2), ve(i, 3), count);
}
#endif

// s0 = m0 + m1 + m2, s1 = m1 - m2 - m3 over n lanes: one stage of A^T M A.
inline void output_stage(const float* __restrict m0, const float* __restrict m1, const float* __restrict m2, const float* __restrict m3,
                         float* __restrict s0, float* __restrict s1, int64_t n) {
  for (int64_t t = 0; t < n; ++t) s0[t] = m0[t] + m1[t] + m2[t], s1[t] = m1[t] - m2[t] - m3[t];
}

// Y = A^T M A for output channel o of every tile, A^T = [1 1 1 0; 0 1 -1 -1], then the 2x2
// outputs (with the bias) written where they fall inside the output. s holds A^T M (8 rows).
void output_tiles(const Winograd3x3& a, const TileBlock& b, const float* m, int64_t tb, int64_t o, float* s, float* y) {
  const int64_t ms = e_stride(a.o, tb);
  const auto me = [&](int e) { return m + e * ms + o * tb; };
  for (int q = 0; q < 4; ++q) output_stage(me(q), me(4 + q), me(8 + q), me(12 + q), s + q * tb, s + (4 + q) * tb, b.count);
  for (int i = 0; i < 2; ++i) {
    const float* r = s + 4 * i * tb;
    output_stage(r, r + tb, r + 2 * tb, r + 3 * tb, y + (2 * i) * tb, y + (2 * i + 1) * tb, b.count);
  }
  const float bias = a.bias ? a.bias[o] : 0.0f;
  // By runs along a tile row: each output row of the run interleaves two arrays (the tiles'
  // left and right columns), contiguous stores; a last tile past an odd width writes its left.
  for (const TileBlock::Run& run : b.runs) {
    const int64_t t0 = run.first, n = run.len;
    const int64_t oy = b.y0[t0] + a.ph, ox = b.x0[t0] + a.pw;
    const int64_t whole = std::min(n, (a.wo - ox) / 2);  // tiles with both columns inside
    float* plane = a.out + (b.img[t0] * a.o + o) * a.ho * a.wo;
    for (int i = 0; i < 2 && oy + i < a.ho; ++i) {
      float* __restrict dst = plane + (oy + i) * a.wo + ox;
      const float* __restrict left = y + (2 * i) * tb + t0;
      const float* __restrict right = y + (2 * i + 1) * tb + t0;
      for (int64_t k = 0; k < whole; ++k) dst[2 * k] = left[k] + bias, dst[2 * k + 1] = right[k] + bias;
      if (whole < n) dst[2 * whole] = left[whole] + bias;
    }
  }
}

#if defined(TESSERA_CPU_AVX512)
// gather_patches + transform_patches in registers (AVX-512): for up to 14 tiles of a run, the
// 4 input rows they cover (2n + 2 <= 30 columns) are two masked 16-lane loads each (masked-off
// lanes are the zero padding and are never read), B^T d combines whole rows, and each of the
// 4 patch columns of the combined rows is an even/odd lane selection (vpermt2ps). Same float
// operations in the same order as the two-step path: identical results, no patch buffers.
// The scalar gather was a quarter of the convolution's time.
inline const float* offset_ptr(const float* p, int64_t elements) {  // may point before the row: only unmasked lanes are read
  return reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(elements * 4));
}

void gather_transform_avx512(const Winograd3x3& a, const TileBlock& b, int64_t c, int64_t tb, float* v) {
  constexpr int64_t kChunk = 14;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i col_index[4] = {even, _mm512_add_epi32(even, _mm512_set1_epi32(1)), _mm512_add_epi32(even, _mm512_set1_epi32(2)),
                                _mm512_add_epi32(even, _mm512_set1_epi32(3))};
  const int64_t vs = e_stride(a.c, tb);
  const auto ve = [&](int e) { return v + e * vs + c * tb; };
  for (const TileBlock::Run& run : b.runs) {
    const float* plane = a.x + (b.img[run.first] * a.c + c) * a.h * a.w;
    for (int64_t done = 0; done < run.len; done += kChunk) {
      const int64_t t0 = run.first + done, n = std::min(kChunk, run.len - done), x0 = b.x0[t0];
      const int64_t first = std::max<int64_t>(0, -x0), end = std::min<int64_t>(2 * n + 2, a.w - x0);
      const uint32_t valid = end > first ? static_cast<uint32_t>(((uint64_t{1} << end) - 1) & ~((uint64_t{1} << first) - 1)) : 0u;
      __m512 lo[4], hi[4];
      for (int r = 0; r < 4; ++r) {
        const int64_t y = b.y0[t0] + r;
        if (y < 0 || y >= a.h) {
          lo[r] = hi[r] = _mm512_setzero_ps();
          continue;
        }
        const float* row = plane + y * a.w;
        lo[r] = _mm512_maskz_loadu_ps(static_cast<__mmask16>(valid), offset_ptr(row, x0));
        hi[r] = _mm512_maskz_loadu_ps(static_cast<__mmask16>(valid >> 16), offset_ptr(row, x0 + 16));
      }
      // B^T d: rows (r0 - r2, r1 + r2, r2 - r1, r1 - r3), whole lines at a time.
      const __m512 rl[4] = {_mm512_sub_ps(lo[0], lo[2]), _mm512_add_ps(lo[1], lo[2]), _mm512_sub_ps(lo[2], lo[1]), _mm512_sub_ps(lo[1], lo[3])};
      const __m512 rh[4] = {_mm512_sub_ps(hi[0], hi[2]), _mm512_add_ps(hi[1], hi[2]), _mm512_sub_ps(hi[2], hi[1]), _mm512_sub_ps(hi[1], hi[3])};
      const __mmask16 store = static_cast<__mmask16>((1u << n) - 1);
      for (int i = 0; i < 4; ++i) {
        __m512 col[4];
        for (int q = 0; q < 4; ++q) col[q] = _mm512_permutex2var_ps(rl[i], col_index[q], rh[i]);
        _mm512_mask_storeu_ps(ve(4 * i + 0) + t0, store, _mm512_sub_ps(col[0], col[2]));
        _mm512_mask_storeu_ps(ve(4 * i + 1) + t0, store, _mm512_add_ps(col[1], col[2]));
        _mm512_mask_storeu_ps(ve(4 * i + 2) + t0, store, _mm512_sub_ps(col[2], col[1]));
        _mm512_mask_storeu_ps(ve(4 * i + 3) + t0, store, _mm512_sub_ps(col[1], col[3]));
      }
    }
  }
}
#endif

// V[e][c][t] of channel c for every tile of the block.
void transform_input_channel(const Winograd3x3& a, const TileBlock& b, int64_t c, int64_t tb, float* patch, float* line, float* bd, float* v) {
#if defined(TESSERA_CPU_AVX512)
  (void)patch, (void)line, (void)bd;
  gather_transform_avx512(a, b, c, tb, v);
#else
  gather_patches(a, b, c, tb, patch, line);
  transform_patches(patch, bd, tb, b.count, a.c, c, v);
#endif
}

template <class T> T* scratch(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

namespace {
// Tiles per block: the block's transformed operands (16 x (C + O) x tb floats) near 1 MiB (L2
// on Zen 4; 160 tiles for the CNN's 32 -> 64 layer: 5.2 ms against 5.6 ms at 64 tiles and 5.5 ms
// at 320), a multiple of 32 (the AVX-512 GEMM's panel width), between 32 and 256. Larger blocks
// repack the transformed weights (the GEMMs' A) less often.
int64_t tiles_per_block(const Winograd3x3& a) { return std::clamp<int64_t>((16384 / (a.c + a.o)) / 32 * 32, 32, 256); }

// Tiles [t0, t0 + count) in (sample, tile row, tile column) order.
void fill_block(const Winograd3x3& a, int64_t t0, int64_t tiles, int64_t tb, TileBlock& blk) {
  const int64_t th = (a.ho + 1) / 2, tw = (a.wo + 1) / 2;
  blk.img.resize(static_cast<size_t>(tb)), blk.y0.resize(static_cast<size_t>(tb)), blk.x0.resize(static_cast<size_t>(tb));
  blk.count = std::min(tb, tiles - t0);
  blk.runs.clear();
  for (int64_t t = 0; t < blk.count; ++t) {
    const int64_t tile = t0 + t, img = tile / (th * tw), r = tile % (th * tw);
    blk.img[t] = img, blk.y0[t] = 2 * (r / tw) - a.ph, blk.x0[t] = 2 * (r % tw) - a.pw;
    if (t == 0 || r % tw == 0) blk.runs.push_back({t, 0});
    ++blk.runs.back().len;
  }
}

// A dY A^T of each tile's 2x2 output gradient (zero outside the output), A^T = [1 1 1 0;
// 0 1 -1 -1], into w[e][o][t]: the weight gradient's counterpart of V.
inline void grad_stage(const float* __restrict a, const float* __restrict b, float* __restrict o0, float* __restrict o1, float* __restrict o2,
                       float* __restrict o3, int64_t n) {
  for (int64_t t = 0; t < n; ++t) o0[t] = a[t], o1[t] = a[t] + b[t], o2[t] = a[t] - b[t], o3[t] = -b[t];
}

void transform_grad_tiles(const Winograd3x3& a, const TileBlock& b, int64_t tb, int64_t o, float* dyt, float* ady, float* w) {
  for (const TileBlock::Run& run : b.runs) {  // rows of the run's tiles, de-interleaved
    const int64_t t0 = run.first, n = run.len;
    const int64_t oy = b.y0[t0] + a.ph, ox = b.x0[t0] + a.pw;
    const int64_t whole = std::min(n, (a.wo - ox) / 2);
    const float* plane = a.grad_out + (b.img[t0] * a.o + o) * a.ho * a.wo;
    for (int i = 0; i < 2; ++i) {
      float* __restrict left = dyt + (2 * i) * tb + t0;
      float* __restrict right = dyt + (2 * i + 1) * tb + t0;
      if (oy + i >= a.ho) {
        std::fill(left, left + n, 0.0f), std::fill(right, right + n, 0.0f);
        continue;
      }
      const float* __restrict src = plane + (oy + i) * a.wo + ox;
      for (int64_t k = 0; k < whole; ++k) left[k] = src[2 * k], right[k] = src[2 * k + 1];
      if (whole < n) left[whole] = src[2 * whole], right[whole] = 0.0f;
    }
  }
  // (A dY) column by column, then each of its rows times A^T: both stages map (a, b) to
  // (a, a + b, a - b, -b). Whole arrays at a time, as for the input transform.
  const auto row = [&](int i, int j) { return ady + (2 * i + j) * tb; };
  for (int j = 0; j < 2; ++j) grad_stage(dyt + j * tb, dyt + (2 + j) * tb, row(0, j), row(1, j), row(2, j), row(3, j), b.count);
  const int64_t ws = e_stride(a.o, tb);
  const auto we = [&](int e) { return w + e * ws + o * tb; };
  for (int i = 0; i < 4; ++i) grad_stage(row(i, 0), row(i, 1), we(4 * i), we(4 * i + 1), we(4 * i + 2), we(4 * i + 3), b.count);
}
}  // namespace

void winograd_conv3x3(const Winograd3x3& a) {
  const int64_t tiles = a.n * ((a.ho + 1) / 2) * ((a.wo + 1) / 2);
  if (tiles == 0) return;
  // Reused across calls (per calling thread): above malloc's mmap threshold a fresh vector costs
  // page faults on every call (7% of a forward + backward profile with the buffers below).
  thread_local std::vector<float> u_buf;
  float* u = scratch(u_buf, static_cast<size_t>(16 * a.o * a.c));
  transform_weights(a, u);
  const int64_t tb = tiles_per_block(a), blocks = (tiles + tb - 1) / tb;
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> patch_buf, bd_buf, v_buf, m_buf, y_buf, line_buf;
    float* patch = scratch(patch_buf, static_cast<size_t>(16 * tb));
    float* line = scratch(line_buf, static_cast<size_t>(2 * tb + 2));
    float* bd = scratch(bd_buf, static_cast<size_t>(16 * tb));
    const int64_t vs = e_stride(a.c, tb), ms = e_stride(a.o, tb);
    float* v = scratch(v_buf, static_cast<size_t>(16 * vs));
    float* m = scratch(m_buf, static_cast<size_t>(16 * ms));
    float* y = scratch(y_buf, static_cast<size_t>(12 * tb));  // A^T M (8 rows), then Y (4)
    TileBlock blk;
    for (int64_t bi = b0; bi < b1; ++bi) {
      fill_block(a, bi * tb, tiles, tb, blk);
      for (int64_t c = 0; c < a.c; ++c) transform_input_channel(a, blk, c, tb, patch, line, bd, v);
      for (int64_t e = 0; e < 16; ++e) {
        sgemm(a.o, blk.count, a.c, {u + e * a.o * a.c, DType::f32, a.c, 1}, {v + e * vs, DType::f32, tb, 1}, m + e * ms, tb,
              {}, false);
      }
      for (int64_t o = 0; o < a.o; ++o) output_tiles(a, blk, m, tb, o, y + 4 * tb, y);
    }
  });
}

void winograd_conv3x3_weight_grad(const Winograd3x3& a) {
  const int64_t tiles = a.n * ((a.ho + 1) / 2) * ((a.wo + 1) / 2);
  const int64_t tb = tiles_per_block(a), blocks = (tiles + tb - 1) / tb;
  // dU[e] (C x O per e) = sum over tiles of V[e] (C x tiles) @ (A dY A^T)[e]^T. Blocks are summed
  // in chunks of a fixed size, each chunk's partial in its own slot, then the slots in order:
  // the result does not depend on the thread count.
  constexpr int64_t kChunk = 4;
  const int64_t chunks = (blocks + kChunk - 1) / kChunk, slot = 16 * a.c * a.o;
  thread_local std::vector<float> partial_buf;
  float* partial = scratch(partial_buf, static_cast<size_t>(std::max<int64_t>(chunks, 1) * slot));
  std::fill(partial, partial + std::max<int64_t>(chunks, 1) * slot, 0.0f);
  parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
    thread_local std::vector<float> patch_buf, bd_buf, v_buf, w_buf, prod_buf, line_buf;
    float* patch = scratch(patch_buf, static_cast<size_t>(16 * tb));
    float* line = scratch(line_buf, static_cast<size_t>(2 * tb + 2));
    float* bd = scratch(bd_buf, static_cast<size_t>(16 * tb));
    const int64_t vs = e_stride(a.c, tb), ws = e_stride(a.o, tb);
    float* v = scratch(v_buf, static_cast<size_t>(16 * vs));
    float* w = scratch(w_buf, static_cast<size_t>(16 * ws));
    float* prod = scratch(prod_buf, static_cast<size_t>(slot));
    TileBlock blk;
    for (int64_t ci = c0; ci < c1; ++ci) {
      float* acc = partial + ci * slot;
      for (int64_t bi = ci * kChunk; bi < std::min(blocks, (ci + 1) * kChunk); ++bi) {
        fill_block(a, bi * tb, tiles, tb, blk);
        for (int64_t c = 0; c < a.c; ++c) transform_input_channel(a, blk, c, tb, patch, line, bd, v);
        for (int64_t o = 0; o < a.o; ++o) transform_grad_tiles(a, blk, tb, o, patch, bd, w);
        for (int64_t e = 0; e < 16; ++e) {
          sgemm(a.c, a.o, blk.count, {v + e * vs, DType::f32, tb, 1}, {w + e * ws, DType::f32, 1, tb}, prod + e * a.c * a.o, a.o, {},
                false);
        }
        for (int64_t i = 0; i < slot; ++i) acc[i] += prod[i];
      }
    }
  });
  for (int64_t ci = 1; ci < chunks; ++ci) {
    const float* src = partial + ci * slot;
    for (int64_t i = 0; i < slot; ++i) partial[i] += src[i];
  }
  // dg = G^T dU G, G^T = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 1].
  for (int64_t o = 0; o < a.o; ++o) {
    for (int64_t c = 0; c < a.c; ++c) {
      float d[4][4];
      for (int e = 0; e < 16; ++e) d[e / 4][e % 4] = partial[(e * a.c + c) * a.o + o];
      float gd[3][4];
      for (int j = 0; j < 4; ++j) {
        gd[0][j] = d[0][j] + 0.5f * (d[1][j] + d[2][j]);
        gd[1][j] = 0.5f * (d[1][j] - d[2][j]);
        gd[2][j] = 0.5f * (d[1][j] + d[2][j]) + d[3][j];
      }
      float* out = a.grad_weight + (o * a.c + c) * 9;
      for (int i = 0; i < 3; ++i) {
        out[i * 3 + 0] = gd[i][0] + 0.5f * (gd[i][1] + gd[i][2]);
        out[i * 3 + 1] = 0.5f * (gd[i][1] - gd[i][2]);
        out[i * 3 + 2] = 0.5f * (gd[i][1] + gd[i][2]) + gd[i][3];
      }
    }
  }
}

TESSERA_CPU_KERNELS_END
