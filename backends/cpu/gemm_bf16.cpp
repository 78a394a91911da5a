// The driver of the AVX512_BF16 GEMM (gemm_bf16.h), built for the baseline ISA: K is walked in
// kKC slabs; per slab B is packed into 32-column panels of k-pairs and A into 12-row panels of
// k-pairs (both in parallel), then the micro-kernel runs over (row block, column block) tasks.
// Every output tile is owned by one task and sums its slabs in order, so results do not depend
// on the thread count.
#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "cpu_backend.h"
#include "gemm.h"
#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "tessera/kernels/half.h"
#include "tessera/runtime.h"

TESSERA_CPU_KERNELS_BEGIN
namespace bf16_packing {
using namespace ::tessera::cpu::bf16;

namespace {
constexpr int64_t kMC = 144;   // rows per task (12 panels; a 144 x 1024 bf16 A block = 288 KiB, in L2)
constexpr int64_t kNC = 256;   // columns per task (8 panels), halved down to 64 while there are too few tasks

// A[i0:i0+mc, p0:p0+kc] -> panels of kMR rows x kc/2 pairs (zero-padded rows and odd K). A
// row-major A gives each pair as one aligned-enough 32-bit read.
void pack_a(const GemmOperand& a, int64_t i0, int64_t mc, int64_t p0, int64_t kc, uint32_t* dst) {
  const int64_t pairs = (kc + 1) / 2, full = kc / 2;
  const auto* src = static_cast<const uint16_t*>(a.data);
  for (int64_t ip = 0; ip < mc; ip += kMR, dst += pairs * kMR) {
    const int64_t rows = std::min(kMR, mc - ip);
    if (rows == kMR && a.col_stride == 1 && full == pairs) {
      // Whole panel, row-major: each packed group of 12 words is written once, contiguously.
      const unsigned char* row[kMR];
      for (int64_t r = 0; r < kMR; ++r) row[r] = reinterpret_cast<const unsigned char*>(src + (i0 + ip + r) * a.row_stride + p0);
      for (int64_t p = 0; p < pairs; ++p) {
        for (int64_t r = 0; r < kMR; ++r) std::memcpy(&dst[p * kMR + r], row[r] + 4 * p, 4);
      }
      continue;
    }
    for (int64_t r = 0; r < kMR; ++r) {
      if (r >= rows) {
        for (int64_t p = 0; p < pairs; ++p) dst[p * kMR + r] = 0;
        continue;
      }
      const uint16_t* row = src + (i0 + ip + r) * a.row_stride + p0 * a.col_stride;
      if (a.col_stride == 1) {
        const auto* words = reinterpret_cast<const unsigned char*>(row);
        for (int64_t p = 0; p < full; ++p) std::memcpy(&dst[p * kMR + r], words + 4 * p, 4);
      } else {
        for (int64_t p = 0; p < full; ++p) {
          dst[p * kMR + r] = static_cast<uint32_t>(row[2 * p * a.col_stride]) | (static_cast<uint32_t>(row[(2 * p + 1) * a.col_stride]) << 16);
        }
      }
      if (full < pairs) dst[full * kMR + r] = row[2 * full * a.col_stride];
    }
  }
}

// B[p0:p0+kc, j0:j0+nc] -> panels of kNR columns x kc/2 pairs: panel[p * 64 + (c / 16) * 32 +
// (c % 16) * 2 + e] = B(2p + e, c). Row-major B interleaves two contiguous rows; a transposed B
// (a weight read as w^T) walks each column, whose pairs are then adjacent.
// Panels are `pair_rows` >= pairs apart, the rows past `pairs` zero (AMX's whole chunks).
void pack_b(const GemmOperand& b, int64_t p0, int64_t kc, int64_t j0, int64_t nc, uint16_t* dst, int64_t pair_rows) {
  const int64_t pairs = (kc + 1) / 2;
  const auto* src = static_cast<const uint16_t*>(b.data) + p0 * b.row_stride + j0 * b.col_stride;
  for (int64_t jp = 0; jp < nc; jp += kNR) {
    uint16_t* panel = dst + (jp / kNR) * pair_rows * 2 * kNR;
    const int64_t cols = std::min(kNR, nc - jp);
    if (cols < kNR || kc % 2) std::memset(panel, 0, static_cast<size_t>(pairs * 2 * kNR) * sizeof(uint16_t));
    if (pair_rows > pairs) std::memset(panel + pairs * 2 * kNR, 0, static_cast<size_t>((pair_rows - pairs) * 2 * kNR) * sizeof(uint16_t));
    if (b.col_stride == 1) {
      int64_t k = 0;
#if defined(__AVX2__)
      // Whole panels: interleave two rows of 16 columns with two unpacks and two lane permutes.
      for (; cols == kNR && k + 1 < kc; k += 2) {
        const uint16_t* r0 = src + k * b.row_stride + jp;
        const uint16_t* r1 = r0 + b.row_stride;
        uint16_t* out = panel + (k / 2) * 2 * kNR;
        for (int half = 0; half < 2; ++half) {
          const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + 16 * half));
          const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + 16 * half));
          const __m256i lo = _mm256_unpacklo_epi16(x0, x1), hi = _mm256_unpackhi_epi16(x0, x1);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * half), _mm256_permute2x128_si256(lo, hi, 0x20));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * half + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
        }
      }
#endif
      for (; k < kc; ++k) {
        const uint16_t* row = src + k * b.row_stride + jp;
        uint16_t* out = panel + (k / 2) * 2 * kNR + (k % 2);
        for (int64_t c = 0; c < cols; ++c) out[(c / 16) * 32 + (c % 16) * 2] = row[c];
      }
    } else {
      for (int64_t c = 0; c < cols; ++c) {
        const uint16_t* col = src + (jp + c) * b.col_stride;
        uint16_t* out = panel + (c / 16) * 32 + (c % 16) * 2;
        for (int64_t k = 0; k < kc; ++k) out[(k / 2) * 2 * kNR + (k % 2)] = col[k * b.row_stride];
      }
    }
  }
}

// A[i0:i0+mc, p0:p0+kc] -> AMX panels of 32 rows: per chunk of 32 K values, each row's 32
// bf16 contiguous (gemm_amx.h), zero past K and past the last row.
void pack_a_amx(const GemmOperand& a, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int64_t chunks, uint16_t* dst) {
  using amx::kMR, amx::kTileK, amx::kPanel;
  const auto* src = static_cast<const uint16_t*>(a.data);
  for (int64_t ip = 0; ip < mc; ip += kMR, dst += kPanel * chunks) {
    for (int64_t r = 0; r < kMR; ++r) {
      const bool live = ip + r < mc;
      const uint16_t* row = live ? src + (i0 + ip + r) * a.row_stride + p0 * a.col_stride : nullptr;
      for (int64_t c = 0; c < chunks; ++c) {
        uint16_t* out = dst + c * kPanel + r * kTileK;
        const int64_t n = live ? std::clamp<int64_t>(kc - c * kTileK, 0, kTileK) : 0;
        // Past the last row or past K (n = 0) no pointer into A is formed: zeros only.
        if (a.col_stride == 1 && n > 0) {
          std::memcpy(out, row + c * kTileK, static_cast<size_t>(n) * sizeof(uint16_t));
        } else {
          for (int64_t e = 0; e < n; ++e) out[e] = row[(c * kTileK + e) * a.col_stride];
        }
        std::fill(out + n, out + kTileK, uint16_t{0});
      }
    }
  }
}
}  // namespace

// The AMX GEMM: the AVX512_BF16 driver's plan (K slabs, B and A packed per slab in parallel,
// one owner per output tile summing its slabs in order) with AMX's panels and block function.
bool sgemm_amx(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b, float* c, int64_t ldc, bool parallel,
               uint16_t* out16, int64_t ldo) {
  using amx::kMR, amx::kNR, amx::kTileK, amx::kPanel;
  // K per slab: 1024 (A block 128 x 1024 bf16 = 256 KiB and a 64 KiB B panel, the AVX512_BF16
  // driver's choice on Zen 4; to be tuned on AMX hardware). Rows per task 128, columns 256.
  constexpr int64_t kSlabK = 1024, kTaskRows = 128, kTaskCols = 256;
  const amx::Mode mode = amx::mode();
  void (*block_fn)(const amx::Block&) = mode == amx::Mode::hardware ? &amx::hardware_block : &amx::emulated_block;
  thread_local std::vector<float> partial;
  if (out16 && k > kSlabK) {
    partial.resize(static_cast<size_t>(m * n));
    c = partial.data();
    ldc = n;
  }
  const int64_t chunks_max = (std::min(k, kSlabK) + kTileK - 1) / kTileK;
  const int64_t m_pad = (m + kMR - 1) / kMR * kMR, n_pad = (n + kNR - 1) / kNR * kNR;
  thread_local std::vector<uint16_t> packed_a, packed_b;
  packed_a.resize(static_cast<size_t>(m_pad * chunks_max * kTileK));
  packed_b.resize(static_cast<size_t>(n_pad * chunks_max * kTileK));
  uint16_t *pa = packed_a.data(), *pb = packed_b.data();
  int64_t nc_block = kTaskCols;
  const int64_t row_blocks = (m + kTaskRows - 1) / kTaskRows, want = parallel ? 4 * std::max(1, num_threads()) : 1;
  while (nc_block > kNR && row_blocks * ((n + nc_block - 1) / nc_block) < want) nc_block /= 2;
  const int64_t col_blocks = (n + nc_block - 1) / nc_block;
  const int64_t pack_grain = parallel ? 1 : (1 << 30), work_grain = parallel ? 1 : row_blocks * col_blocks + 1;
  for (int64_t p0 = 0; p0 < k; p0 += kSlabK) {
    const int64_t kc = std::min(kSlabK, k - p0), chunks = (kc + kTileK - 1) / kTileK;
    const bool first = p0 == 0, last = p0 + kc == k;
    parallel_for(col_blocks, pack_grain, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t j0 = blk * nc_block;
        pack_b(b, p0, kc, j0, std::min(nc_block, n - j0), pb + j0 * chunks * kTileK, chunks * kTileK / 2);
      }
    });
    parallel_for(row_blocks, pack_grain, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t i0 = blk * kTaskRows;
        pack_a_amx(a, i0, std::min(kTaskRows, m - i0), p0, kc, chunks, pa + i0 * chunks * kTileK);
      }
    });
    parallel_for(row_blocks * col_blocks, work_grain, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t i0 = (t / col_blocks) * kTaskRows, j0 = (t % col_blocks) * nc_block;
        amx::Block blk{std::min(kTaskRows, m - i0),
                       std::min(nc_block, n - j0),
                       chunks,
                       pa + i0 * chunks * kTileK,
                       pb + j0 * chunks * kTileK,
                       out16 && first && last ? nullptr : c + i0 * ldc + j0,
                       ldc,
                       !first,
                       out16 && last ? out16 + i0 * ldo + j0 : nullptr,
                       ldo};
        block_fn(blk);
      }
    });
  }
  return true;
}
}  // namespace bf16_packing

bool sgemm_bf16(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b, float* c, int64_t ldc, bool parallel,
                BFloat16* out, int64_t ldo) {
  using namespace ::tessera::cpu::bf16;
  using namespace bf16_packing;
  if (a.dtype != DType::bf16 || b.dtype != DType::bf16 || m <= 0 || n <= 0 || k <= 0) return false;
  if (amx::mode() != amx::Mode::off) return sgemm_amx(m, n, k, a, b, c, ldc, parallel, reinterpret_cast<uint16_t*>(out), ldo);
  if (!available()) return false;
  // A bf16 result: the last slab's tiles are rounded in registers straight into `out`; earlier
  // slabs (K > kKC) sum in an f32 scratch.
  thread_local std::vector<float> partial;
  if (out && k > kKC) {
    partial.resize(static_cast<size_t>(m * n));
    c = partial.data();
    ldc = n;
  }
  auto* out16 = reinterpret_cast<uint16_t*>(out);
  const int64_t m_pad = (m + kMR - 1) / kMR * kMR, n_pad = (n + kNR - 1) / kNR * kNR, kc_max = std::min(k, kKC);
  const int64_t pairs_max = (kc_max + 1) / 2;
  thread_local std::vector<uint32_t> packed_a;
  thread_local std::vector<uint16_t> packed_b;
  packed_a.resize(static_cast<size_t>(m_pad * pairs_max));
  packed_b.resize(static_cast<size_t>(n_pad * pairs_max * 2));
  uint32_t* pa = packed_a.data();
  uint16_t* pb = packed_b.data();
  // Enough tasks for the pool (the training shapes have one row block): the partition only
  // decides who computes a tile, never how, so results do not depend on it.
  int64_t nc_block = kNC;
  const int64_t row_blocks = (m + kMC - 1) / kMC, want = parallel ? 4 * std::max(1, num_threads()) : 1;
  while (nc_block > 2 * kNR && row_blocks * ((n + nc_block - 1) / nc_block) < want) nc_block /= 2;
  const int64_t col_blocks = (n + nc_block - 1) / nc_block;
  const int64_t pack_grain = parallel ? 1 : (1 << 30), work_grain = parallel ? 1 : row_blocks * col_blocks + 1;
  for (int64_t p0 = 0; p0 < k; p0 += kKC) {
    const int64_t kc = std::min(kKC, k - p0), pairs = (kc + 1) / 2;
    const bool first = p0 == 0, last = p0 + kc == k;
    parallel_for(col_blocks, pack_grain, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t j0 = blk * nc_block;
        pack_b(b, p0, kc, j0, std::min(nc_block, n - j0), pb + j0 * pairs * 2, pairs);
      }
    });
    parallel_for(row_blocks, pack_grain, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t i0 = blk * kMC;
        pack_a(a, i0, std::min(kMC, m - i0), p0, kc, pa + i0 * pairs);
      }
    });
    parallel_for(row_blocks * col_blocks, work_grain, [&](int64_t t0, int64_t t1) {
      float edge[kMR * kNR];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t i0 = (t / col_blocks) * kMC, j0 = (t % col_blocks) * nc_block;
        const int64_t i1 = std::min(m, i0 + kMC), j1 = std::min(n, j0 + nc_block);
        for (int64_t j = j0; j < j1; j += kNR) {
          const uint16_t* bp = pb + j * pairs * 2;
          const int64_t cols = std::min(kNR, n - j);
          for (int64_t i = i0; i < i1; i += kMR) {
            const uint32_t* ap = pa + i * pairs;
            const int64_t rows = std::min(kMR, m - i);
            float* ct = out && first && last ? nullptr : c + i * ldc + j;
            uint16_t* ot = out && last ? out16 + i * ldo + j : nullptr;
            if (rows == kMR && cols == kNR) {
              micro_kernel(pairs, ap, bp, ct, ldc, !first, ot, ldo);
              continue;
            }
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t q = 0; q < cols; ++q) edge[r * kNR + q] = first ? 0.0f : ct[r * ldc + q];
            }
            micro_kernel(pairs, ap, bp, edge, kNR, true, nullptr, 0);
            for (int64_t r = 0; r < rows; ++r) {
              if (ot) {
                for (int64_t q = 0; q < cols; ++q) out[i * ldo + j + r * ldo + q] = BFloat16(edge[r * kNR + q]);
              } else {
                std::memcpy(ct + r * ldc, edge + r * kNR, static_cast<size_t>(cols) * sizeof(float));
              }
            }
          }
        }
      }
    });
  }
  return true;
}

TESSERA_CPU_KERNELS_END
