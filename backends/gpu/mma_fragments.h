#pragma once
// Operand fragments of the matrix-unit kernels (mma.h) as packed 32-bit words (two 16-bit
// elements): staging of 16-bit tiles into shared memory (asynchronous 16-byte copies where the
// rows allow), fragment loads from row- or column-major tiles (a word at a time where the two
// elements are adjacent, ldmatrix.trans on sm_80+ where they are not), and the conversion of
// f32 accumulators into the A fragments of the next product (from registers where the shape's
// C layout is its A layout, else through the warp's own rows of shared memory).
#include "mma.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {

/** Whether 16-bit rows of `width` elements from `p` can be copied 16 bytes at a time. */
TESSERA_DEVICE bool rows_vectorizable(const void* p, int64_t width, int kD) {
  return width == kD && kD % 8 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

/** Starts the copy of a rows x kD tile of a row-major 16-bit matrix [nrows, width] (rows from
 *  r0) into dst[r * ld + x] (ld a multiple of 8), zeros past the matrix: asynchronous 16-byte
 *  copies when `vec` (complete after async_copy_wait and a barrier), else element by element. */
template <int kD>
TESSERA_DEVICE void issue_rows(const uint16_t* src, int64_t nrows, int64_t width, int64_t r0, int rows, uint16_t* dst, int ld, bool vec) {
  const int tid = static_cast<int>(thread_x()), nt = static_cast<int>(block_dim_x());
  if (vec) {
    constexpr int kChunks = kD / 8;
    for (int c = tid; c < rows * kChunks; c += nt) {
      const int r = c / kChunks, x = (c % kChunks) * 8;
      const bool in = r0 + r < nrows;
      async_copy16(dst + r * ld + x, in ? src + (r0 + r) * kD + x : src, in);
    }
  } else {
    for (int e = tid; e < rows * kD; e += nt) {
      const int r = e / kD, x = e % kD;
      dst[r * ld + x] = (r0 + r < nrows && x < width) ? src[(r0 + r) * width + x] : uint16_t{0};
    }
  }
}

/** A[r][c] = t[(r0 + r) * ld + c0 + c]: pairs of A elements are adjacent along c (both shapes). */
template <class Shape>
TESSERA_DEVICE void load_a_words(uint32_t (&w)[Shape::A / 2], const uint16_t* t, int ld, int r0, int c0, int ln) {
  TESSERA_UNROLL
  for (int e = 0; e < Shape::A; e += 2) w[e / 2] = load_u16_pair(t + (r0 + Shape::a_row(ln, e)) * ld + c0 + Shape::a_col(ln, e));
}
/** B[k][n] = t[(n0 + n) * ld + k0 + k] (stored n-major): pairs adjacent along k. */
template <class Shape>
TESSERA_DEVICE void load_b_words_nk(uint32_t (&w)[Shape::B / 2], const uint16_t* t, int ld, int n0, int k0, int ln) {
  TESSERA_UNROLL
  for (int e = 0; e < Shape::B; e += 2) w[e / 2] = load_u16_pair(t + (n0 + Shape::b_col(ln, e)) * ld + k0 + Shape::b_row(ln, e));
}
/** B[k][n] = t[(k0 + k) * ld + n0 + n] (stored k-major): the two elements of a word are in
 *  different rows. On sm_80+ one ldmatrix.trans (lanes 0-15 address the rows k0..k0+15, 16-byte
 *  aligned; lane l receives B[(l % 4) * 2 + {0, 1} (+ 8)][l / 4], the mma.sync B fragment);
 *  elsewhere two 16-bit reads per word. */
template <class Shape>
TESSERA_DEVICE void load_b_words_kn(uint32_t (&w)[Shape::B / 2], const uint16_t* t, int ld, int k0, int n0, int ln) {
  if constexpr (kHasMmaSync && std::is_same_v<Shape, MmaSync16x8x16>) {
    ldmatrix_x2_trans(w[0], w[1], t + (k0 + (ln & 15)) * ld + n0);
  } else {
    TESSERA_UNROLL
    for (int e = 0; e < Shape::B; e += 2) {
      w[e / 2] = pack_bits(t[(k0 + Shape::b_row(ln, e)) * ld + n0 + Shape::b_col(ln, e)],
                           t[(k0 + Shape::b_row(ln, e + 1)) * ld + n0 + Shape::b_col(ln, e + 1)]);
    }
  }
}
/** A fragments (row-major [rows, cols] global matrix, rows from r0 + the shape's rows): zeros
 *  outside. Read once per tile of output rows, so element by element. */
template <class Shape, class T, int KD>
TESSERA_DEVICE void load_a_global(uint32_t (&w)[KD][Shape::A / 2], const T* m, int64_t rows, int64_t cols, int64_t r0, int ln) {
  TESSERA_UNROLL
  for (int kk = 0; kk < KD; ++kk) {
    TESSERA_UNROLL
    for (int e = 0; e < Shape::A; e += 2) {
      uint16_t h[2];
      TESSERA_UNROLL
      for (int t = 0; t < 2; ++t) {
        const int64_t r = r0 + Shape::a_row(ln, e + t);
        const int x = kk * Shape::K + Shape::a_col(ln, e + t);
        h[t] = r < rows && x < cols ? m[r * cols + x].bits : uint16_t{0};
      }
      w[kk][e / 2] = pack_bits(h[0], h[1]);
    }
  }
}

/** Combines v over the lanes holding the same accumulator row. */
template <class Shape, class Op>
TESSERA_DEVICE float row_allreduce(float v, Op op) {
  TESSERA_UNROLL
  for (int m = 1; m < Shape::kRowLanes; m <<= 1) v = op(v, shfl_xor(v, m));
  return v;
}

/**
 * The A fragments of one K-step made from accumulators c[tile][element] of a 16-row product
 * (probabilities or dS): from registers where C's layout is A's, else through `mine` (the
 * warp's 16 rows of shared memory, row stride ld), written by every lane before any reads.
 * (c by pointer: GCC folds the instances for different F into one and then warns about bounds.)
 */
template <class Shape, class T, int F>
TESSERA_DEVICE void accum_to_a(const float (*c)[Shape::C], int kk, uint32_t (&w)[Shape::A / 2], const uint16_t* mine, int ld, int ln) {
  if constexpr (Shape::kCIsA) {
    (void)mine, (void)ld, (void)ln;
    TESSERA_UNROLL
    for (int e = 0; e < Shape::A; e += 2) {
      w[e / 2] =
          pack_rn<T>(c[Shape::c_tile_for_a(kk, e)][Shape::c_elem_for_a(e)], c[Shape::c_tile_for_a(kk, e + 1)][Shape::c_elem_for_a(e + 1)]);
    }
  } else {
    load_a_words<Shape>(w, mine, ld, 0, kk * Shape::K, ln);
  }
}
template <class Shape, class T, int F>
TESSERA_DEVICE void accum_to_shared(const float (*c)[Shape::C], uint16_t* mine, int ld, int ln) {
  if constexpr (!Shape::kCIsA) {
    TESSERA_UNROLL
    for (int f = 0; f < F; ++f) {
      TESSERA_UNROLL
      for (int e = 0; e < Shape::C; ++e) mine[Shape::c_row(ln, e) * ld + f * Shape::N + Shape::c_col(ln, e)] = T(c[f][e]).bits;
    }
    sync_warp();  // every lane's rows are written before any lane reads its A fragments
  } else {
    (void)c, (void)mine, (void)ld, (void)ln;
  }
}

/**
 * acc[f] += A B over KT K-steps and F N-tiles, where A is made from the accumulators c of a
 * 16-row product (FC N-tiles of them; through `mine`, the warp's rows of shared memory with
 * stride ldm, where the shape needs it) and B is a k-major tile, B[k][n] = t[k * ld + n]: the
 * second product of attention (O += P V, dQ += dS K, dV += P^T dO, dK += dS^T Q).
 */
template <class Shape, class T, int KT, int F, int FC>
TESSERA_DEVICE void mma_accum_times_kn(float (*acc)[Shape::C], const float (*c)[Shape::C], uint16_t* mine, int ldm, const uint16_t* t,
                                       int ld, int ln) {
  accum_to_shared<Shape, T, FC>(c, mine, ldm, ln);
  TESSERA_UNROLL
  for (int kk = 0; kk < KT; ++kk) {
    uint32_t a[Shape::A / 2];
    accum_to_a<Shape, T, FC>(c, kk, a, mine, ldm, ln);
    TESSERA_UNROLL
    for (int f = 0; f < F; ++f) {
      uint32_t w[Shape::B / 2];
      load_b_words_kn<Shape>(w, t, ld, kk * Shape::K, f * Shape::N, ln);
      mma_w<Shape, T>(acc[f], a, w);
    }
  }
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
