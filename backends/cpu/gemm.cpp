// Packed, cache-blocked GEMM in the style of BLIS/GotoBLAS:
//   for each KC-deep slab of K:  pack B (KC x N) into NR-wide panels, pack A (M x KC) into
//   MR-tall panels, then run the MR x NR register-tiled micro-kernel over all (MR, NR) tiles,
//   parallel over tiles. The epilogue (bias + activation) runs on a tile right after its last
//   slab, while the tile is still in cache.
#include "gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if (defined(__AVX2__) && defined(__FMA__)) || defined(__F16C__) || defined(TESSERA_CPU_AVX512)
#include <immintrin.h>
#endif

#include "cpu_backend.h"
#include "pack_transpose.h"
#include "vec_math.h"

TESSERA_CPU_KERNELS_BEGIN
namespace {

#if defined(TESSERA_CPU_AVX512)
constexpr int64_t kMR = 12;    // micro-tile rows (broadcast A)
constexpr int64_t kNR = 32;    // micro-tile columns (two 16-wide vectors of B)
#else
constexpr int64_t kMR = 6;     // micro-tile rows (broadcast A)
constexpr int64_t kNR = 16;    // micro-tile columns (two 8-wide vectors of B)
#endif
// Depth of a slab. 512 (B panels of 32 or 64 KiB, a 96 x 512 A block of 192 KiB in L2) beat 256
// on Zen 4: AVX-512 sgemm 1024/2048/4096 at 1.02/0.98/0.99x OpenBLAS vs 0.95/0.78/0.93x.
constexpr int64_t kKC = 512;
constexpr int64_t kMC = 96;    // rows per task
constexpr int64_t kNCols = 128;  // columns per task (8 panels)

float load(const void* base, DType dt, int64_t index) {
  switch (dt) {
    case DType::f16: return static_cast<float>(static_cast<const Half*>(base)[index]);
    case DType::bf16: return static_cast<float>(static_cast<const BFloat16*>(base)[index]);
    default: return static_cast<const float*>(base)[index];
  }
}

// Runs f with the operand's data as a typed pointer, so the packing loops below are compiled
// once per element type instead of switching on the dtype per element.
template <class F> void with_typed(const GemmOperand& op, F&& f) {
  switch (op.dtype) {
    case DType::f16: f(static_cast<const Half*>(op.data)); return;
    case DType::bf16: f(static_cast<const BFloat16*>(op.data)); return;
    default: f(static_cast<const float*>(op.data)); return;
  }
}

// Operand element -> float. f16 uses the F16C instruction where the kernels are built for it
// (exact, like the portable conversion, and several times faster); bf16 is a shift.
inline float to_float(float v) { return v; }
inline float to_float(BFloat16 v) { return static_cast<float>(v); }
inline float to_float(Half v) {
#if defined(__F16C__)
  return _cvtsh_ss(v.bits);
#else
  return static_cast<float>(v);
#endif
}

// A[i0:i0+mc, p0:p0+kc] -> panels of kMR rows: panel[k * kMR + r], zero-padded. An f32 A with
// contiguous rows (the usual row-major A) goes through square register transposes.
void pack_a(const GemmOperand& a, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* dst) {
  static_assert(kMR <= kTransposeWidth);
  if (a.dtype == DType::f32 && a.col_stride == 1) {
    const float* src = static_cast<const float*>(a.data);
    constexpr int64_t w = kTransposeWidth;
    for (int64_t ip = 0; ip < mc; ip += kMR, dst += kc * kMR) {
      const int rows = static_cast<int>(std::min(kMR, mc - ip));
      const float* base = src + (i0 + ip) * a.row_stride + p0;
      int64_t k = 0;
      for (; k + w <= kc; k += w) transpose_block(base + k, a.row_stride, rows, dst + k * kMR, kMR, static_cast<int>(kMR));
      for (; k < kc; ++k) {
        for (int64_t r = 0; r < kMR; ++r) dst[k * kMR + r] = r < rows ? base[r * a.row_stride + k] : 0.0f;
      }
    }
    return;
  }
  with_typed(a, [&](const auto* src) {
    const int64_t rs = a.row_stride, cs = a.col_stride;
    for (int64_t ip = 0; ip < mc; ip += kMR, dst += kc * kMR) {
      const int64_t rows = std::min(kMR, mc - ip);
      const auto* base = src + (i0 + ip) * rs + p0 * cs;
      if (rows < kMR) std::fill(dst, dst + kc * kMR, 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        const auto* row = base + r * rs;
        for (int64_t k = 0; k < kc; ++k) dst[k * kMR + r] = to_float(row[k * cs]);
      }
    }
  });
}

// B[p0:p0+kc, j0:j0+nc] -> panels of kNR columns: panel[k * kNR + c], zero-padded. Row-major B
// copies 16-wide rows; a transposed f32 B (a weight read as w^T) goes through square register
// transposes, other transposed B walks each column contiguously.
void pack_b(const GemmOperand& b, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  static_assert(kNR % kTransposeWidth == 0);
  if (b.dtype == DType::f32 && b.row_stride == 1 && b.col_stride != 1) {
    const float* src = static_cast<const float*>(b.data);
    constexpr int64_t w = kTransposeWidth;
    for (int64_t jp = 0; jp < nc; jp += kNR) {
      const int64_t cols = std::min(kNR, nc - jp);
      float* panel = dst + (jp / kNR) * kc * kNR;
      for (int64_t c0 = 0; c0 < kNR; c0 += w) {  // w columns of the panel at a time (past `cols`: zeros)
        const int rows = static_cast<int>(std::clamp<int64_t>(cols - c0, 0, w));
        const float* base = src + p0 + (j0 + jp + c0) * b.col_stride;
        int64_t k = 0;
        for (; k + w <= kc; k += w) transpose_block(base + k, b.col_stride, rows, panel + k * kNR + c0, kNR, static_cast<int>(w));
        for (; k < kc; ++k) {
          for (int64_t c = 0; c < w; ++c) panel[k * kNR + c0 + c] = c < rows ? base[c * b.col_stride + k] : 0.0f;
        }
      }
    }
    return;
  }
  with_typed(b, [&](const auto* src) {
    const int64_t rs = b.row_stride, cs = b.col_stride;
    for (int64_t jp = 0; jp < nc; jp += kNR) {
      const int64_t cols = std::min(kNR, nc - jp);
      float* panel = dst + (jp / kNR) * kc * kNR;
      const auto* base = src + p0 * rs + (j0 + jp) * cs;
      if (cols < kNR) std::fill(panel, panel + kc * kNR, 0.0f);
      if (cs == 1) {
        for (int64_t k = 0; k < kc; ++k) {
          for (int64_t c = 0; c < cols; ++c) panel[k * kNR + c] = to_float(base[k * rs + c]);
        }
      } else {
        for (int64_t c = 0; c < cols; ++c) {
          const auto* col = base + c * cs;
          for (int64_t k = 0; k < kc; ++k) panel[k * kNR + c] = to_float(col[k * rs]);
        }
      }
    }
  });
}

// c[kMR x kNR] (row stride ldc) = (accumulate ? c : 0) + a_panel . b_panel
#if defined(TESSERA_CPU_AVX512)
// 24 named ZMM accumulators (12 rows x two 16-wide vectors) + 2 B vectors + 1 broadcast: 27 of
// the 32 registers. Twice the tile of the AVX2 kernel per instruction, and each B load now
// feeds 12 FMAs instead of 6, which is what lets the FMA units run without load stalls.
void micro_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
#define TESSERA_ZERO(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps();
  TESSERA_ZERO(0) TESSERA_ZERO(1) TESSERA_ZERO(2) TESSERA_ZERO(3) TESSERA_ZERO(4) TESSERA_ZERO(5)
  TESSERA_ZERO(6) TESSERA_ZERO(7) TESSERA_ZERO(8) TESSERA_ZERO(9) TESSERA_ZERO(10) TESSERA_ZERO(11)
#undef TESSERA_ZERO
  for (int64_t k = 0; k < kc; ++k, a += kMR, b += kNR) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#define TESSERA_FMA(r)                                   \
  {                                                      \
    const __m512 av = _mm512_set1_ps(a[r]);              \
    c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);          \
    c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);          \
  }
    TESSERA_FMA(0) TESSERA_FMA(1) TESSERA_FMA(2) TESSERA_FMA(3) TESSERA_FMA(4) TESSERA_FMA(5)
    TESSERA_FMA(6) TESSERA_FMA(7) TESSERA_FMA(8) TESSERA_FMA(9) TESSERA_FMA(10) TESSERA_FMA(11)
#undef TESSERA_FMA
  }
#define TESSERA_STORE(r)                                                 \
  {                                                                      \
    float* row = c + r * ldc;                                            \
    if (accumulate) {                                                    \
      c##r##0 = _mm512_add_ps(c##r##0, _mm512_loadu_ps(row));             \
      c##r##1 = _mm512_add_ps(c##r##1, _mm512_loadu_ps(row + 16));        \
    }                                                                    \
    _mm512_storeu_ps(row, c##r##0);                                      \
    _mm512_storeu_ps(row + 16, c##r##1);                                 \
  }
  TESSERA_STORE(0) TESSERA_STORE(1) TESSERA_STORE(2) TESSERA_STORE(3) TESSERA_STORE(4) TESSERA_STORE(5)
  TESSERA_STORE(6) TESSERA_STORE(7) TESSERA_STORE(8) TESSERA_STORE(9) TESSERA_STORE(10) TESSERA_STORE(11)
#undef TESSERA_STORE
}
#elif defined(__AVX2__) && defined(__FMA__)
// 12 named accumulators: written out so they stay in YMM registers at any -O level (an
// array indexed in a loop the compiler does not fully unroll would spill to the stack).
void micro_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
#define TESSERA_ZERO(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
  TESSERA_ZERO(0) TESSERA_ZERO(1) TESSERA_ZERO(2) TESSERA_ZERO(3) TESSERA_ZERO(4) TESSERA_ZERO(5)
#undef TESSERA_ZERO
  for (int64_t k = 0; k < kc; ++k, a += kMR, b += kNR) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#define TESSERA_FMA(r)                                   \
  {                                                      \
    const __m256 av = _mm256_broadcast_ss(a + r);        \
    c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);          \
    c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);          \
  }
    TESSERA_FMA(0) TESSERA_FMA(1) TESSERA_FMA(2) TESSERA_FMA(3) TESSERA_FMA(4) TESSERA_FMA(5)
#undef TESSERA_FMA
  }
#define TESSERA_STORE(r)                                                                  \
  {                                                                                       \
    float* row = c + r * ldc;                                                             \
    if (accumulate) {                                                                     \
      c##r##0 = _mm256_add_ps(c##r##0, _mm256_loadu_ps(row));                              \
      c##r##1 = _mm256_add_ps(c##r##1, _mm256_loadu_ps(row + 8));                          \
    }                                                                                     \
    _mm256_storeu_ps(row, c##r##0);                                                       \
    _mm256_storeu_ps(row + 8, c##r##1);                                                   \
  }
  TESSERA_STORE(0) TESSERA_STORE(1) TESSERA_STORE(2) TESSERA_STORE(3) TESSERA_STORE(4) TESSERA_STORE(5)
#undef TESSERA_STORE
}
#else
// Portable path: two passes over 8 columns each, so the 6 x 8 accumulator block fits the 16
// 128-bit registers of baseline x86-64 / NEON and the compiler keeps it there.
void micro_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  for (int half = 0; half < 2; ++half) {
    float acc[kMR][8] = {};
    for (int64_t k = 0; k < kc; ++k) {
      const float* bk = b + k * kNR + half * 8;
      for (int r = 0; r < kMR; ++r) {
        const float av = a[k * kMR + r];
        for (int j = 0; j < 8; ++j) acc[r][j] += av * bk[j];
      }
    }
    for (int r = 0; r < kMR; ++r) {
      float* row = c + r * ldc + half * 8;
      for (int j = 0; j < 8; ++j) row[j] = (accumulate ? row[j] : 0.0f) + acc[r][j];
    }
  }
}
#endif

// The activation is dispatched once per tile, not per element, so each row loop is a plain
// vectorisable loop over one functor.
template <class Act> void activate_rows(float* c, int64_t ldc, int64_t rows, int64_t cols, Act act) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = c + r * ldc;
    for (int64_t j = 0; j < cols; ++j) row[j] = act(row[j]);
  }
}

void epilogue_tile(float* c, int64_t ldc, int64_t rows, int64_t cols, int64_t j0, const GemmEpilogue& e) {
  if (e.bias) {
    for (int64_t r = 0; r < rows; ++r) {
      float* row = c + r * ldc;
      if (e.bias_dtype == DType::f32) {
        const float* b = static_cast<const float*>(e.bias) + j0;
        for (int64_t j = 0; j < cols; ++j) row[j] += b[j];
      } else {
        for (int64_t j = 0; j < cols; ++j) row[j] += load(e.bias, e.bias_dtype, j0 + j);
      }
    }
  }
  switch (e.activation) {
    case Activation::none: return;
    case Activation::relu: activate_rows(c, ldc, rows, cols, kernels::ReluFn{}); return;
    case Activation::gelu: activate_rows(c, ldc, rows, cols, vmath::GeluFn{}); return;
    case Activation::gelu_tanh: activate_rows(c, ldc, rows, cols, vmath::GeluTanhFn{}); return;
    case Activation::silu: activate_rows(c, ldc, rows, cols, vmath::SiluFn{}); return;
    case Activation::sigmoid: activate_rows(c, ldc, rows, cols, vmath::SigmoidFn{}); return;
    case Activation::tanh: activate_rows(c, ldc, rows, cols, vmath::TanhFn{}); return;
    default: activate_rows(c, ldc, rows, cols, [&](float v) { return kernels::apply_activation(e.activation, v); });
  }
}

// One slab's contribution to C[i0:i1, j0:j1]: the micro-kernel over every (kMR, kNR) tile, edge
// tiles through a scratch tile; the epilogue runs on a tile after the last slab, while it is
// still in cache. a_at(i) / b_at(j) give the packed panels of row i and column j.
template <class APanel, class BPanel>
void run_tiles(int64_t kc, int64_t m, int64_t n, int64_t i0, int64_t i1, int64_t j0, int64_t j1, const APanel& a_at,
               const BPanel& b_at, float* c, int64_t ldc, bool first, bool last, const GemmEpilogue& epilogue) {
  float edge[kMR * kNR];
  for (int64_t j = j0; j < j1; j += kNR) {
    const float* bp = b_at(j);
    const int64_t cols = std::min(kNR, n - j);
    for (int64_t i = i0; i < i1; i += kMR) {
      const float* ap = a_at(i);
      const int64_t rows = std::min(kMR, m - i);
      float* ct = c + i * ldc + j;
      if (rows == kMR && cols == kNR) {
        micro_kernel(kc, ap, bp, ct, ldc, !first);
      } else {
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t q = 0; q < cols; ++q) edge[r * kNR + q] = first ? 0.0f : ct[r * ldc + q];
        }
        micro_kernel(kc, ap, bp, edge, kNR, true);
        for (int64_t r = 0; r < rows; ++r) std::memcpy(ct + r * ldc, edge + r * kNR, static_cast<size_t>(cols) * sizeof(float));
      }
      if (last) epilogue_tile(ct, ldc, rows, cols, j, epilogue);
    }
  }
}

// Small A (the training shapes: batch-sized M): A is packed whole, for every slab, in one
// parallel pass; then each task owns a block of columns, packs its B panels slab by slab into
// its own buffer and runs all row tiles. Two fork-joins per call instead of three per slab,
// and B is packed by the thread that uses it.
constexpr int64_t kSmallPackedA = 256 * 1024;  // floats of packed A (1 MiB) for this path
constexpr int64_t kSmallNCols = 64;            // columns per task (4 panels)

void sgemm_small(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b, float* c, int64_t ldc,
                 const GemmEpilogue& epilogue, bool parallel) {
  const int64_t m_pad = (m + kMR - 1) / kMR * kMR, slabs = (k + kKC - 1) / kKC, row_blocks = (m + kMC - 1) / kMC;
  thread_local std::vector<float> packed_a;
  packed_a.resize(static_cast<size_t>(m_pad * k));
  float* pa = packed_a.data();  // slab s starts at pa + m_pad * s * kKC
  parallel_for(slabs * row_blocks, parallel ? 1 : (1 << 30), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t p0 = (t / row_blocks) * kKC, i0 = (t % row_blocks) * kMC, kc = std::min(kKC, k - p0);
      pack_a(a, i0, std::min(kMC, m - i0), p0, kc, pa + m_pad * p0 + i0 * kc);
    }
  });
  const int64_t col_blocks = (n + kSmallNCols - 1) / kSmallNCols;
  parallel_for(col_blocks, parallel ? 1 : col_blocks + 1, [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> packed_b;
    packed_b.resize(static_cast<size_t>(kKC * kSmallNCols));
    float* pb = packed_b.data();
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t j0 = blk * kSmallNCols, j1 = std::min(n, j0 + kSmallNCols);
      for (int64_t p0 = 0; p0 < k; p0 += kKC) {
        const int64_t kc = std::min(kKC, k - p0);
        pack_b(b, p0, kc, j0, j1 - j0, pb);
        const float* pa_slab = pa + m_pad * p0;
        run_tiles(
            kc, m, n, 0, m, j0, j1, [&](int64_t i) { return pa_slab + i * kc; }, [&](int64_t j) { return pb + (j - j0) * kc; }, c,
            ldc, p0 == 0, p0 + kc == k, epilogue);
      }
    }
  });
}
}  // namespace

void dgemm(int64_t m, int64_t n, int64_t k, const double* a, int64_t ars, int64_t acs, const double* b, int64_t brs,
           int64_t bcs, double* c, int64_t ldc, bool parallel) {
  parallel_for(m, parallel ? 1 : m + 1, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      double* ci = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) ci[j] = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = a[i * ars + p * acs];
        const double* bp = b + p * brs;
        for (int64_t j = 0; j < n; ++j) ci[j] += av * bp[j * bcs];
      }
    }
  });
}

namespace {
size_t dtype_bytes(DType dt) { return dt == DType::f32 ? 4 : 2; }

// Few output blocks but a long K (a weight gradient: 64 x 288 outputs summed over 25,088
// positions): the block grid cannot keep the threads busy, so K is cut into a number of
// chunks fixed by the shape alone, each chunk's product goes to its own buffer on one thread,
// and the buffers are added in chunk order: the result does not depend on the thread count.
bool sgemm_split_k(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b, float* c, int64_t ldc,
                   const GemmEpilogue& epilogue, bool parallel) {
  const int64_t blocks = ((m + kMC - 1) / kMC) * ((n + kNCols - 1) / kNCols);
  if (blocks >= 8 || k < 8 * kKC) return false;
  const int64_t splits = std::min<int64_t>(8, k / (4 * kKC));
  std::vector<float> partial(static_cast<size_t>(splits * m * n));
  parallel_for(splits, parallel ? 1 : splits + 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t p0 = k * s / splits, p1 = k * (s + 1) / splits;
      const GemmOperand as{static_cast<const char*>(a.data) + p0 * a.col_stride * static_cast<int64_t>(dtype_bytes(a.dtype)), a.dtype,
                           a.row_stride, a.col_stride};
      const GemmOperand bs{static_cast<const char*>(b.data) + p0 * b.row_stride * static_cast<int64_t>(dtype_bytes(b.dtype)), b.dtype,
                           b.row_stride, b.col_stride};
      sgemm(m, n, p1 - p0, as, bs, partial.data() + s * m * n, n, {}, false);
    }
  });
  parallel_for(m, parallel ? std::max<int64_t>(1, 4096 / n) : m + 1, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      float* row = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) row[j] = partial[static_cast<size_t>(i * n + j)];
      for (int64_t s = 1; s < splits; ++s) {
        const float* src = partial.data() + s * m * n + i * n;
        for (int64_t j = 0; j < n; ++j) row[j] += src[j];
      }
      epilogue_tile(row, ldc, 1, n, 0, epilogue);
    }
  });
  return true;
}
}  // namespace

void sgemm(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b, float* c, int64_t ldc,
           const GemmEpilogue& epilogue, bool parallel) {
  if (m <= 0 || n <= 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    epilogue_tile(c, ldc, m, n, 0, epilogue);
    return;
  }
  if (sgemm_bf16(m, n, k, a, b, c, ldc, parallel)) {
    if (epilogue.bias || epilogue.activation != Activation::none) {
      parallel_for(m, parallel ? std::max<int64_t>(1, 4096 / n) : m + 1, [&](int64_t r0, int64_t r1) {
        epilogue_tile(c + r0 * ldc, ldc, r1 - r0, n, 0, epilogue);
      });
    }
    return;
  }
  const int64_t m_pad = (m + kMR - 1) / kMR * kMR, n_pad = (n + kNR - 1) / kNR * kNR;
  if (m_pad * k <= kSmallPackedA) {
    sgemm_small(m, n, k, a, b, c, ldc, epilogue, parallel);
    return;
  }
  // Chosen by shape alone (not by `parallel` or the thread count), so results never depend on them.
  if (sgemm_split_k(m, n, k, a, b, c, ldc, epilogue, parallel)) return;
  // Thread-local scratch: reused across calls so steady-state GEMMs do not allocate.
  thread_local std::vector<float> packed_a, packed_b;
  const int64_t kc_max = std::min(k, kKC);
  packed_a.resize(static_cast<size_t>(m_pad * kc_max));
  packed_b.resize(static_cast<size_t>(n_pad * kc_max));
  float* pa = packed_a.data();
  float* pb = packed_b.data();
  const int64_t row_blocks = (m + kMC - 1) / kMC, col_blocks = (n + kNCols - 1) / kNCols;
  const int64_t work_grain = parallel ? 1 : row_blocks * col_blocks + 1;
  const int64_t pack_grain = parallel ? 1 : (1 << 30);

  for (int64_t p0 = 0; p0 < k; p0 += kKC) {
    const int64_t kc = std::min(kKC, k - p0);
    const bool first = p0 == 0, last = p0 + kc == k;
    parallel_for((n + kNCols - 1) / kNCols, pack_grain, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t j0 = blk * kNCols;
        pack_b(b, p0, kc, j0, std::min(kNCols, n - j0), pb + j0 * kc);
      }
    });
    parallel_for(row_blocks, pack_grain, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t i0 = blk * kMC;
        pack_a(a, i0, std::min(kMC, m - i0), p0, kc, pa + i0 * kc);
      }
    });
    parallel_for(row_blocks * col_blocks, work_grain, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t i0 = (t / col_blocks) * kMC, j0 = (t % col_blocks) * kNCols;
        run_tiles(
            kc, m, n, i0, std::min(m, i0 + kMC), j0, std::min(n, j0 + kNCols), [&](int64_t i) { return pa + i * kc; },
            [&](int64_t j) { return pb + j * kc; }, c, ldc, first, last, epilogue);
      }
    });
  }
}

TESSERA_CPU_KERNELS_END
