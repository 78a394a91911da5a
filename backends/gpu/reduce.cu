// Reductions, arg-reductions, cumsum and softmax. The host lays the reduced axes out as the
// rows of a contiguous [rows, len] tensor (a copy only when they are not already last and
// dense). Accumulation is in the compute type (f32 for f32/f16/bf16, f64 only for f64): each
// thread sums its strided 16-byte packs with Kahan compensation and threads combine in a fixed
// shared-memory tree finished by warp shuffles (rows up to 2,048: a warp per row, shuffles
// only), so results are deterministic for a given shape.
// Few long rows (a whole-tensor sum) are split into chunks reduced by separate blocks and
// combined by a second pass, so a 16M-element sum keeps hundreds of SMs busy, not one.
#include <cmath>
#include <numeric>

#include "../common/row_layout.h"
#include "common.h"
#include "kernels.h"
#include "warp_rows.h"
#include "tessera/kernels/convert.h"
#include "tessera/kernels/reduce.h"
#include "tessera/ops/creation.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {
namespace {
using backend_common::along_axis;
using backend_common::as_rows;

// Sums in the compute type (the shared SumReducer widens floats to double: 2x slower on data
// center GPUs, 16-64x on consumer ones); integers still wrap in uint64.
template <class T> struct GpuSum {
  using Acc = std::conditional_t<kernels::is_float_like_v<T>, compute_t<T>, uint64_t>;
  static constexpr bool kCompensated = std::is_same_v<Acc, float>;
  static TESSERA_HD Acc init() { return Acc(0); }
  static TESSERA_HD Acc merge(Acc a, Acc b) { return a + b; }
  static TESSERA_HD Acc step(Acc a, T v) { return a + static_cast<Acc>(static_cast<compute_t<T>>(v)); }
  static TESSERA_HD T finish(Acc a) { return kernels::finish_wide<T>(a); }
  TESSERA_HD Acc operator()(Acc a, Acc b) const { return merge(a, b); }
};
template <class T> using ProdOp = kernels::ProdReducer<T>;
template <class T> using MaxOp = kernels::MaxReducer<T>;
template <class T> using MinOp = kernels::MinReducer<T>;

template <class Op> constexpr bool compensated() {
  if constexpr (requires { Op::kCompensated; }) return Op::kCompensated;
  else return false;
}

// One thread's running reduction, Kahan-compensated for f32 sums; the compensation is dropped
// once the sum is not finite so inf stays inf.
template <class Op, class T>
struct ThreadAccumulator {
  using Acc = typename Op::Acc;
  Acc acc = Op::init(), c = Acc(0);
  TESSERA_DEVICE void add(T v) {
    if constexpr (compensated<Op>()) {
      const Acc y = static_cast<Acc>(static_cast<compute_t<T>>(v)) - c;
      const Acc t = acc + y;
      c = t - t == Acc(0) ? (t - acc) - y : Acc(0);  // t - t is 0 exactly when t is finite
      acc = t;
    } else {
      acc = Op::step(acc, v);
    }
  }
};

// Elements a thread loads at once: 16 bytes, but one of a one-byte type (packs of them made
// ptxas spill in the int8 extremes, as in the byte binary_vec_kernel: known-spills.txt).
template <class T>
inline constexpr int kReducePack = sizeof(T) == 1 ? 1 : kPack<T>;

// This thread's share of in[begin, end), seen as packs of kReducePack elements counted from
// begin: packs first, first + stride, ... in order, each pack's elements in order, the partial
// last pack included. The order depends on the shape only; a pack is one load where in + begin
// is aligned (else element by element), two to four packs in flight per thread (one scalar load
// in flight per thread left a 16M-element sum at half of PyTorch's speed on an H200).
template <class Op, class T>
TESSERA_DEVICE typename Op::Acc thread_accumulate(const T* in, int64_t begin, int64_t end, int64_t first, int64_t stride) {
  constexpr int N = kReducePack<T>, U = N >= 8 ? 2 : 4;
  const T* base = in + begin;
  const int64_t len = end - begin, full = len / N;
  const bool vec = reinterpret_cast<uintptr_t>(base) % (sizeof(T) * N) == 0;
  const auto load = [&](Pack<T, N>& v, int64_t q) {
    if (vec) {
      v = reinterpret_cast<const Pack<T, N>*>(base)[q];
    } else {
      TESSERA_UNROLL
      for (int j = 0; j < N; ++j) v.v[j] = base[q * N + j];
    }
  };
  ThreadAccumulator<Op, T> a;
  int64_t p = first;
  for (; p + (U - 1) * stride < full; p += U * stride) {
    Pack<T, N> v[U];
    TESSERA_UNROLL
    for (int u = 0; u < U; ++u) load(v[u], p + u * stride);
    TESSERA_UNROLL
    for (int u = 0; u < U; ++u) {
      TESSERA_UNROLL
      for (int j = 0; j < N; ++j) a.add(v[u].v[j]);
    }
  }
  for (; p < full; p += stride) {
    Pack<T, N> v;
    load(v, p);
    TESSERA_UNROLL
    for (int j = 0; j < N; ++j) a.add(v.v[j]);
  }
  if (p == full) {
    for (int64_t j = full * N; j < len; ++j) a.add(base[j]);
  }
  return a.acc;
}

// Reduces v across the block (blockDim a power of two >= the warp size); every thread gets it.
template <class Acc, class Op> TESSERA_DEVICE Acc block_reduce(Acc v, Op op, Acc* smem) {
  const unsigned t = thread_x(), n = block_dim_x(), warp = static_cast<unsigned>(warp_size());
  smem[t] = v;
  sync_threads();
  for (unsigned s = n / 2; s >= warp; s >>= 1) {
    if (t < s) smem[t] = op(smem[t], smem[t + s]);
    sync_threads();
  }
  if (t < warp) {
    Acc r = smem[t];
    for (unsigned off = warp / 2; off > 0; off >>= 1) r = op(r, shfl_down(r, static_cast<int>(off)));
    if (t == 0) smem[0] = r;
  }
  sync_threads();
  const Acc r = smem[0];
  sync_threads();  // smem is reused by the next call
  return r;
}

template <class T, class Op> TESSERA_GLOBAL void reduce_rows_kernel(int64_t rows, int64_t len, const T* in, T* out) {
  using Acc = typename Op::Acc;
  TESSERA_SHARED_ARRAY(Acc, smem, kThreads);
  for (int64_t r = block_x(); r < rows; r += grid_dim_x()) {
    const Acc acc = block_reduce(thread_accumulate<Op>(in, r * len, (r + 1) * len, thread_x(), block_dim_x()), Op{}, smem);
    if (thread_x() == 0) out[r] = Op::finish(acc);
  }
}

// Rows up to kWarpRowLen elements, a warp per row: shuffles only, no block barrier (a block per
// 1,024-element row spent most of its time in the tree's barriers: 0.53x PyTorch on an H200).
constexpr int64_t kWarpRowLen = 2048;
template <class T, class Op>
TESSERA_GLOBAL void reduce_rows_warp_kernel(int64_t rows, int64_t len, const T* in, T* out) {
  for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
    const auto acc = warp_all_reduce(thread_accumulate<Op>(in, r * len, (r + 1) * len, gpu::lane(), warp_size()), Op{});
    if (gpu::lane() == 0) out[r] = Op::finish(acc);
  }
}

// Pass 1 of a chunked reduction: block b reduces chunk b % chunks of row b / chunks.
template <class T, class Op>
TESSERA_GLOBAL void reduce_chunks_kernel(int64_t rows, int64_t len, int64_t chunks, int64_t chunk_len, const T* in, typename Op::Acc* partial) {
  using Acc = typename Op::Acc;
  TESSERA_SHARED_ARRAY(Acc, smem, kThreads);
  for (int64_t b = block_x(); b < rows * chunks; b += grid_dim_x()) {
    const int64_t r = b / chunks, begin = (b % chunks) * chunk_len;
    const int64_t end = begin + chunk_len < len ? begin + chunk_len : len;
    const Acc acc = block_reduce(thread_accumulate<Op>(in + r * len, begin, end, thread_x(), block_dim_x()), Op{}, smem);
    if (thread_x() == 0) partial[b] = acc;
  }
}

// Pass 2: a block per row merges its chunks' partial results in chunk order.
template <class T, class Op> TESSERA_GLOBAL void merge_chunks_kernel(int64_t rows, int64_t chunks, const typename Op::Acc* partial, T* out) {
  using Acc = typename Op::Acc;
  TESSERA_SHARED_ARRAY(Acc, smem, kThreads);
  for (int64_t r = block_x(); r < rows; r += grid_dim_x()) {
    Acc acc = Op::init();
    for (int64_t j = thread_x(); j < chunks; j += block_dim_x()) acc = Op::merge(acc, partial[r * chunks + j]);
    acc = block_reduce(acc, Op{}, smem);
    if (thread_x() == 0) out[r] = Op::finish(acc);
  }
}

// Reduction over the leading axes of a contiguous tensor seen as [len, cols]: a thread per
// (chunk of rows, column), columns fastest, so a warp reads consecutive elements of a row (the
// row layout would first transpose the tensor with a strided copy). Pass 1 writes one partial
// per (chunk, column); with one chunk it finishes directly.
template <class T, class Op>
TESSERA_GLOBAL void reduce_cols_kernel(int64_t len, int64_t cols, int64_t chunks, int64_t chunk_len, const T* in, typename Op::Acc* partial, T* out) {
  using Acc = typename Op::Acc;
  for (int64_t i = global_index(); i < chunks * cols; i += grid_stride()) {
    const int64_t col = i % cols, chunk = i / cols, begin = chunk * chunk_len;
    const int64_t end = begin + chunk_len < len ? begin + chunk_len : len;
    Acc acc = Op::init();
    if constexpr (compensated<Op>()) {
      Acc c = 0;
      for (int64_t r = begin; r < end; ++r) {
        const Acc y = static_cast<Acc>(static_cast<compute_t<T>>(in[r * cols + col])) - c;
        const Acc t = acc + y;
        c = t - t == Acc(0) ? (t - acc) - y : Acc(0);
        acc = t;
      }
    } else {
      for (int64_t r = begin; r < end; ++r) acc = Op::step(acc, in[r * cols + col]);
    }
    if (chunks == 1) out[col] = Op::finish(acc);
    else partial[i] = acc;
  }
}
template <class T, class Op> TESSERA_GLOBAL void merge_cols_kernel(int64_t chunks, int64_t cols, const typename Op::Acc* partial, T* out) {
  for (int64_t col = global_index(); col < cols; col += grid_stride()) {
    typename Op::Acc acc = Op::init();
    for (int64_t k = 0; k < chunks; ++k) acc = Op::merge(acc, partial[k * cols + col]);
    out[col] = Op::finish(acc);
  }
}

// Arg-extremes, a warp per row: lanes scan strided elements, then (value, index) pairs merge
// by shuffles. The first extreme wins ties; a NaN beats everything (the first NaN among NaNs).
template <class T, bool kMax> TESSERA_GLOBAL void arg_rows_kernel(int64_t rows, int64_t len, const T* in, int64_t* out) {
  using C = compute_t<T>;
  const auto better = [](C v, int64_t i, C bv, int64_t bi) {  // is (v, i) preferred to (bv, bi)?
    if (v != v || bv != bv) return v != v && (bv == bv || i < bi);
    return kMax ? (v > bv || (v == bv && i < bi)) : (v < bv || (v == bv && i < bi));
  };
  const int64_t lane = gpu::lane(), width = warp_size();
  for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
    C best = static_cast<C>(in[r * len]);
    int64_t bi = 0;
    for (int64_t j = lane; j < len; j += width) {
      const C v = static_cast<C>(in[r * len + j]);
      if (better(v, j, best, bi)) best = v, bi = j;
    }
    for (int m = static_cast<int>(width) / 2; m > 0; m >>= 1) {
      const C ov = shfl_xor(best, m);
      const int64_t oi = shfl_xor(bi, m);
      if (better(ov, oi, best, bi)) best = ov, bi = oi;
    }
    if (lane == 0) out[r] = bi;
  }
}

// Inclusive scan, a block per row: the row goes by in tiles of blockDim elements; each tile is
// scanned in shared memory (Hillis-Steele) and offset by the running total of earlier tiles.
template <class T> TESSERA_GLOBAL void cumsum_rows_kernel(int64_t rows, int64_t len, const T* in, T* out) {
  using Op = GpuSum<T>;
  using Acc = typename Op::Acc;
  TESSERA_SHARED_ARRAY(Acc, smem, kThreads);
  const unsigned t = thread_x(), n = block_dim_x();
  for (int64_t r = block_x(); r < rows; r += grid_dim_x()) {
    Acc carry = Op::init();
    for (int64_t base = 0; base < len; base += n) {
      const int64_t j = base + t;
      smem[t] = j < len ? Op::step(Op::init(), in[r * len + j]) : Op::init();
      sync_threads();
      for (unsigned off = 1; off < n; off <<= 1) {
        const Acc add = t >= off ? smem[t - off] : Op::init();
        sync_threads();
        smem[t] = Op::merge(smem[t], add);
        sync_threads();
      }
      if (j < len) out[r * len + j] = Op::finish(Op::merge(carry, smem[t]));
      carry = Op::merge(carry, smem[n - 1]);
      sync_threads();  // smem is rewritten by the next tile
    }
  }
}

template <class C> struct MaxC {
  TESSERA_HD C operator()(C a, C b) const { return (a != a) ? a : (b != b) ? b : (b > a ? b : a); }
};
template <class C> struct AddC {
  TESSERA_HD C operator()(C a, C b) const { return a + b; }
};

// v across the block, every thread gets it: butterfly shuffles within each warp, then one
// exchange of the warp totals through shared memory (two barriers, where block_reduce takes six).
// The warps' totals combine in warp order, so the result depends on the shape only.
template <class Acc, class Op> TESSERA_DEVICE Acc block_allreduce(Acc v, Op op, Acc* smem) {
  const int warp = warp_size(), nwarps = static_cast<int>(block_dim_x()) / warp, w = static_cast<int>(thread_x()) / warp;
  v = warp_all_reduce(v, op);
  if (gpu::lane() == 0) smem[w] = v;
  sync_threads();
  Acc r = smem[0];
  for (int i = 1; i < nwarps; ++i) r = op(r, smem[i]);
  sync_threads();  // smem is reused by the next call
  return r;
}

// Softmax, a block per row, in the compute type: max, sum of exp(x - max), then the outputs.
// Rows up to kThreads * kSoftmaxPer (1,024) elements stay in registers: one read of the input and one
// exp per element (the general loop below reads the row three times; on an H200 it ran at a
// third of PyTorch's speed on 16384 x 1024).
constexpr int kSoftmaxPer = 4;
template <class T, bool kLog> TESSERA_GLOBAL void softmax_rows_kernel(int64_t rows, int64_t len, const T* in, T* out) {
  using C = compute_t<T>;
  TESSERA_SHARED_ARRAY(C, smem, kThreads);
  const int64_t t = thread_x(), n = block_dim_x();
  if (len <= n * kSoftmaxPer) {
    for (int64_t r = block_x(); r < rows; r += grid_dim_x()) {
      const T* row = in + r * len;
      C v[kSoftmaxPer];
      C mx = -INFINITY;
      TESSERA_UNROLL
      for (int k = 0; k < kSoftmaxPer; ++k) {
        const int64_t j = t + k * n;
        v[k] = j < len ? static_cast<C>(row[j]) : C(-INFINITY);
        mx = MaxC<C>{}(mx, v[k]);
      }
      mx = block_allreduce(mx, MaxC<C>{}, smem);
      if (mx == C(-INFINITY)) mx = 0;  // as below
      C s = 0;
      TESSERA_UNROLL
      for (int k = 0; k < kSoftmaxPer; ++k) {  // softmax keeps exp(x - max), log_softmax x - max
        v[k] -= mx;
        const C e = ::exp(v[k]);
        if (!kLog) v[k] = e;
        if (t + k * n < len) s += e;
      }
      s = block_allreduce(s, AddC<C>{}, smem);
      const C log_s = ::log(s), inv_s = C(1) / s;
      TESSERA_UNROLL
      for (int k = 0; k < kSoftmaxPer; ++k) {
        const int64_t j = t + k * n;
        if (j < len) out[r * len + j] = static_cast<T>(kLog ? v[k] - log_s : v[k] * inv_s);
      }
    }
    return;
  }
  for (int64_t r = block_x(); r < rows; r += grid_dim_x()) {
    const T* row = in + r * len;
    C mx = -INFINITY;
    for (int64_t j = thread_x(); j < len; j += block_dim_x()) mx = MaxC<C>{}(mx, static_cast<C>(row[j]));
    mx = block_reduce(mx, MaxC<C>{}, smem);
    // All -inf rows: shift by 0, not -inf. A +inf max stays: inf - inf makes the whole row NaN, as in PyTorch.
    if (mx == C(-INFINITY)) mx = 0;
    C s = 0;
    for (int64_t j = thread_x(); j < len; j += block_dim_x()) s += ::exp(static_cast<C>(row[j]) - mx);
    s = block_reduce(s, AddC<C>{}, smem);
    const C log_s = ::log(s), inv_s = C(1) / s;
    for (int64_t j = thread_x(); j < len; j += block_dim_x()) {
      const C x = static_cast<C>(row[j]) - mx;
      out[r * len + j] = static_cast<T>(kLog ? x - log_s : ::exp(x) * inv_s);
    }
  }
}

// Softmax of rows that fit a warp's registers (warp_rows.h), a warp per row.
template <class T, bool kLog, int P>
TESSERA_GLOBAL void softmax_warp_kernel(int64_t rows, int64_t len, const T* in, T* out) {
  using C = compute_t<T>;
  constexpr int N = kPack<T>;
  for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
    C v[P][N];
    load_warp_row<T, P>(in + r * len, len, C(-INFINITY), v);
    C mx = -INFINITY;
    TESSERA_UNROLL
    for (int p = 0; p < P; ++p) {
      TESSERA_UNROLL
      for (int j = 0; j < N; ++j) mx = MaxC<C>{}(mx, v[p][j]);
    }
    mx = warp_all_reduce(mx, MaxC<C>{});
    if (mx == C(-INFINITY)) mx = 0;  // as in the block kernel
    C s = 0;
    TESSERA_UNROLL
    for (int p = 0; p < P; ++p) {
      TESSERA_UNROLL
      for (int j = 0; j < N; ++j) {
        v[p][j] -= mx;
        const C e = ::exp(v[p][j]);
        if (!kLog) v[p][j] = e;
        if (in_warp_row<T>(p, len)) s += e;
      }
    }
    s = warp_all_reduce(s, AddC<C>{});
    const C log_s = kLog ? ::log(s) : C(0), inv_s = kLog ? C(0) : reciprocal_rn(s);
    TESSERA_UNROLL
    for (int p = 0; p < P; ++p) {
      TESSERA_UNROLL
      for (int j = 0; j < N; ++j) v[p][j] = kLog ? v[p][j] - log_s : v[p][j] * inv_s;
    }
    store_warp_row<T, P>(out + r * len, len, v);
  }
}

Grid row_blocks(int64_t rows) { return Grid{static_cast<unsigned>(std::clamp<int64_t>(rows, 1, 4096))}; }

// Chunks per row so that few long rows still launch >= kTargetBlocks blocks (above the SM count
// of an H100, 132, or an MI300X, 304), each chunk at least kMinChunk elements. Depends only on
// the shape, so the summation order (and the result) does too.
constexpr int64_t kTargetBlocks = 512, kMinChunk = int64_t{kThreads} * 16;
int64_t chunks_for(int64_t rows, int64_t len) {
  if (rows >= kTargetBlocks || len < 2 * kMinChunk) return 1;
  const int64_t want = (kTargetBlocks + rows - 1) / rows;
  return std::clamp<int64_t>(std::min(want, len / kMinChunk), 1, 4096);
}

template <class T, class Op> void reduce_rows(int64_t nrows, int64_t len, const T* in, T* out, Device device) {
  const int64_t chunks = chunks_for(nrows, len);
  if (chunks == 1 && len <= kWarpRowLen) {
    launch(reduce_rows_warp_kernel<T, Op>, warp_row_blocks(nrows), Grid{kThreads}, 0, true, nrows, len, in, out);
    return;
  }
  if (chunks == 1) {
    launch(reduce_rows_kernel<T, Op>, row_blocks(nrows), Grid{kThreads}, 0, true, nrows, len, in, out);
    return;
  }
  using Acc = typename Op::Acc;
  // Whole packs per chunk, so every chunk of an aligned row loads 16 bytes at a time.
  const int64_t chunk_len = ((len + chunks - 1) / chunks + kReducePack<T> - 1) / kReducePack<T> * kReducePack<T>;
  const Tensor partial = empty({nrows * chunks * static_cast<int64_t>(sizeof(Acc))}, DType::u8, device);
  launch(reduce_chunks_kernel<T, Op>, row_blocks(nrows * chunks), Grid{kThreads}, 0, true, nrows, len, chunks, chunk_len, in,
         ptr<Acc>(partial));
  launch(merge_chunks_kernel<T, Op>, row_blocks(nrows), Grid{kThreads}, 0, true, nrows, chunks, ptr<const Acc>(partial), out);
}

// Enough (chunk, column) threads to fill a large GPU (>= 64K), each chunk at least 64 rows.
template <class T, class Op> void reduce_cols(int64_t len, int64_t cols, const T* in, T* out, Device device) {
  using Acc = typename Op::Acc;
  const int64_t chunks = std::clamp<int64_t>(std::min((65536 + cols - 1) / cols, len / 64), 1, 4096);
  const int64_t chunk_len = (len + chunks - 1) / chunks;
  const Tensor partial = empty({chunks > 1 ? chunks * cols * static_cast<int64_t>(sizeof(Acc)) : 1}, DType::u8, device);
  launch(reduce_cols_kernel<T, Op>, blocks_for(chunks * cols), Grid{kThreads}, 0, false, len, cols, chunks, chunk_len, in,
         ptr<Acc>(partial), out);
  if (chunks > 1) launch(merge_cols_kernel<T, Op>, blocks_for(cols), Grid{kThreads}, 0, false, chunks, cols, ptr<const Acc>(partial), out);
}

// True when `axes` are the leading axes 0..k-1 of a contiguous x (and some axis is kept).
bool leading_axes(const Tensor& x, const std::vector<int64_t>& axes) {
  if (!x.is_contiguous() || axes.empty() || static_cast<int64_t>(axes.size()) >= x.dim()) return false;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

template <template <class> class Op> void reduce_op(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  Tensor& out = c.outputs[0];
  // max/min take every dtype (bool too); sum/prod the numeric ones.
  const auto dispatch = [&](auto&& run) {
    if constexpr (std::is_same_v<Op<float>, MaxOp<float>> || std::is_same_v<Op<float>, MinOp<float>>) {
      backend_common::dispatch_all(x.dtype(), op_name(c.op).data(), run);
    } else {
      backend_common::dispatch_numeric(x.dtype(), op_name(c.op).data(), run);
    }
  };
  if (x.numel() > 0 && leading_axes(x, c.attrs.axes)) {
    const int64_t cols = out.numel(), len = x.numel() / cols;
    dispatch([&]<class T>() { reduce_cols<T, Op<T>>(len, cols, ptr<const T>(x), ptr<T>(out), out.device()); });
    return;
  }
  std::vector<int64_t> order;
  const Tensor rows = as_rows(x, c.attrs.axes, order);
  const int64_t nrows = out.numel(), len = numel(x.shape()) / std::max<int64_t>(nrows, 1);
  dispatch([&]<class T>() { reduce_rows<T, Op<T>>(nrows, x.numel() ? len : 0, ptr<const T>(rows), ptr<T>(out), out.device()); });
}

template <bool kMax> void arg_op(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  std::vector<int64_t> order;
  const Tensor rows = as_rows(x, {c.attrs.axis}, order);
  backend_common::dispatch_numeric(x.dtype(), op_name(c.op).data(), [&]<class T>() {
    launch(arg_rows_kernel<T, kMax>, warp_row_blocks(rows.size(0)), Grid{kThreads}, 0, true, rows.size(0), rows.size(1),
           ptr<const T>(rows), ptr<int64_t>(c.outputs[0]));
  });
}

void cumsum_op(const KernelCall& c) {
  backend_common::dispatch_numeric(c.inputs[0].dtype(), "cumsum", [&]<class T>() {
    along_axis(c, [&](const Tensor& rows, Tensor& res) {
      launch(cumsum_rows_kernel<T>, row_blocks(rows.size(0)), Grid{kThreads}, 0, true, rows.size(0), rows.size(1), ptr<const T>(rows),
             ptr<T>(res));
    });
  });
}

template <bool kLog> void softmax_op(const KernelCall& c) {
  backend_common::dispatch_float(c.inputs[0].dtype(), op_name(c.op).data(), [&]<class T>() {
    along_axis(c, [&](const Tensor& rows, Tensor& res) {
      const int64_t nrows = rows.size(0), len = rows.size(1);
      // Not f64: its exp's slow path, inlined once per element, spills on sm_90.
      const bool vec = !std::is_same_v<T, double> && warp_rows_vectorised<T>(len, {rows.data_ptr(), res.data_ptr()});
      // log_softmax to 4 packs a lane: logf's slow-path call with 32 values live spills on sm_90.
      const bool in_registers = with_warp_row_packs<T>(
          len, vec,
          [&](auto packs) {
            if constexpr (!std::is_same_v<T, double> && !(kLog && decltype(packs)::value > 4)) {
              launch(softmax_warp_kernel<T, kLog, decltype(packs)::value>, warp_row_blocks(nrows), Grid{kThreads}, 0, true, nrows, len,
                     ptr<const T>(rows), ptr<T>(res));
            }
          },
          kLog ? 4 : 8);
      if (!in_registers) {
        launch(softmax_rows_kernel<T, kLog>, row_blocks(nrows), Grid{kThreads}, 0, true, nrows, len, ptr<const T>(rows), ptr<T>(res));
      }
    });
  });
}
}  // namespace

void register_reductions(KernelTable& table) {
  table[OpId::Sum] = &reduce_op<GpuSum>;
  table[OpId::Prod] = &reduce_op<ProdOp>;
  table[OpId::Max] = &reduce_op<MaxOp>;
  table[OpId::Min] = &reduce_op<MinOp>;
  table[OpId::Argmax] = &arg_op<true>;
  table[OpId::Argmin] = &arg_op<false>;
  table[OpId::Cumsum] = &cumsum_op;
  table[OpId::Softmax] = &softmax_op<false>;
  table[OpId::LogSoftmax] = &softmax_op<true>;
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
