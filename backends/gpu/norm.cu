// batch_norm / layer_norm forward and backward, and fused cross entropy. Statistics accumulate
// in the compute type with block reductions (a block per channel or row).
#include <cmath>

#include "../common/row_math.h"
#include "common.h"
#include "tessera/ops/creation.h"
#include "kernels.h"
#include "warp_rows.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {
namespace {

// Same tree as reduce.cu: shared memory down to one warp, then shuffles.
template <class C> TESSERA_DEVICE C block_sum(C v, C* smem) {
  const unsigned t = thread_x(), n = block_dim_x(), warp = static_cast<unsigned>(warp_size());
  smem[t] = v;
  sync_threads();
  for (unsigned s = n / 2; s >= warp; s >>= 1) {
    if (t < s) smem[t] += smem[t + s];
    sync_threads();
  }
  if (t < warp) {
    C r = smem[t];
    for (unsigned off = warp / 2; off > 0; off >>= 1) r += shfl_down(r, static_cast<int>(off));
    if (t == 0) smem[0] = r;
  }
  sync_threads();
  const C r = smem[0];
  sync_threads();
  return r;
}

// Loads in the compute type: f32 for f32/f16/bf16 (f64 arithmetic is 2x slower on data center
// GPUs and 16-64x on consumer ones), f64 for f64.
template <class T> TESSERA_HD_INLINE compute_t<T> ld(const T* p, int64_t i) { return static_cast<compute_t<T>>(p[i]); }

// x [N, C, S]; a block per channel.
template <class T, class S>
TESSERA_GLOBAL void bn_fwd_kernel(int64_t n, int64_t ch, int64_t sp, const T* x, const T* gamma, const T* beta, T* y, S* mean,
                                  S* invstd, double eps) {
  using C = compute_t<T>;
  TESSERA_SHARED_ARRAY(C, smem, kThreads);
  const int64_t m = n * sp;
  for (int64_t k = block_x(); k < ch; k += grid_dim_x()) {
    C s = 0;
    for (int64_t i = thread_x(); i < m; i += block_dim_x()) s += ld(x, ((i / sp) * ch + k) * sp + i % sp);
    const C mu = block_sum(s, smem) / static_cast<C>(m);
    C v = 0;
    for (int64_t i = thread_x(); i < m; i += block_dim_x()) {
      const C d = ld(x, ((i / sp) * ch + k) * sp + i % sp) - mu;
      v += d * d;
    }
    const C inv = C(1) / ::sqrt(block_sum(v, smem) / static_cast<C>(m) + static_cast<C>(eps));
    const C scale = inv * (gamma ? ld(gamma, k) : C(1)), shift = (beta ? ld(beta, k) : C(0)) - mu * scale;
    for (int64_t i = thread_x(); i < m; i += block_dim_x()) {
      const int64_t at = ((i / sp) * ch + k) * sp + i % sp;
      y[at] = static_cast<T>(static_cast<compute_t<T>>(ld(x, at) * scale + shift));
    }
    if (thread_x() == 0) mean[k] = static_cast<S>(mu), invstd[k] = static_cast<S>(inv);
  }
}

template <class T, class S>
TESSERA_GLOBAL void bn_bwd_kernel(int64_t n, int64_t ch, int64_t sp, const T* g, const T* x, const T* gamma, const S* mean,
                                  const S* invstd, T* dx, T* dgamma, T* dbeta) {
  using C = compute_t<T>;
  TESSERA_SHARED_ARRAY(C, smem, kThreads);
  const int64_t m = n * sp;
  for (int64_t k = block_x(); k < ch; k += grid_dim_x()) {
    const C mu = static_cast<C>(mean[k]), inv = static_cast<C>(invstd[k]);
    C sdy = 0, sdyx = 0;
    for (int64_t i = thread_x(); i < m; i += block_dim_x()) {
      const int64_t at = ((i / sp) * ch + k) * sp + i % sp;
      sdy += ld(g, at);
      sdyx += ld(g, at) * (ld(x, at) - mu) * inv;
    }
    sdy = block_sum(sdy, smem);
    sdyx = block_sum(sdyx, smem);
    const C gam = gamma ? ld(gamma, k) : 1.0;
    for (int64_t i = thread_x(); i < m; i += block_dim_x()) {
      const int64_t at = ((i / sp) * ch + k) * sp + i % sp;
      const C xhat = (ld(x, at) - mu) * inv;
      dx[at] = static_cast<T>(static_cast<compute_t<T>>(gam * inv / static_cast<C>(m) * (static_cast<C>(m) * ld(g, at) - sdy - xhat * sdyx)));
    }
    if (thread_x() == 0) dgamma[k] = static_cast<T>(static_cast<compute_t<T>>(sdyx)), dbeta[k] = static_cast<T>(static_cast<compute_t<T>>(sdy));
  }
}

// x [M, D]; a block per row.
template <class T, class S>
TESSERA_GLOBAL void ln_fwd_kernel(int64_t rows, int64_t d, const T* x, const T* gamma, const T* beta, T* y, S* mean, S* rstd, double eps) {
  using C = compute_t<T>;
  TESSERA_SHARED_ARRAY(C, smem, kThreads);
  for (int64_t r = block_x(); r < rows; r += grid_dim_x()) {
    C s = 0;
    for (int64_t j = thread_x(); j < d; j += block_dim_x()) s += ld(x, r * d + j);
    const C mu = block_sum(s, smem) / static_cast<C>(d);
    C v = 0;
    for (int64_t j = thread_x(); j < d; j += block_dim_x()) v += (ld(x, r * d + j) - mu) * (ld(x, r * d + j) - mu);
    const C rs = C(1) / ::sqrt(block_sum(v, smem) / static_cast<C>(d) + static_cast<C>(eps));
    for (int64_t j = thread_x(); j < d; j += block_dim_x()) {
      C val = (ld(x, r * d + j) - mu) * rs;
      if (gamma) val *= ld(gamma, j);
      if (beta) val += ld(beta, j);
      y[r * d + j] = static_cast<T>(static_cast<compute_t<T>>(val));
    }
    if (thread_x() == 0) mean[r] = static_cast<S>(mu), rstd[r] = static_cast<S>(rs);
  }
}

// Rows that fit a warp's registers (warp_rows.h), a warp per row: x read once, the mean and
// then the centred variance (the block kernel's two passes) by shuffles.
template <class T, class S, int P>
TESSERA_GLOBAL void ln_fwd_warp_kernel(int64_t rows, int64_t d, const T* x, const T* gamma, const T* beta, T* y, S* mean, S* rstd,
                                       double eps) {
  using C = compute_t<T>;
  constexpr int N = kPack<T>;
  const auto add = [](C a, C b) { return a + b; };
  C g[P][N] = {}, b[P][N] = {};  // gamma and beta, the same for every row
  if (gamma) load_warp_row<T, P>(gamma, d, C(0), g);
  if (beta) load_warp_row<T, P>(beta, d, C(0), b);
  for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
    C v[P][N];
    load_warp_row<T, P>(x + r * d, d, C(0), v);
    C s = 0;
    TESSERA_UNROLL
    for (int p = 0; p < P; ++p) {
      TESSERA_UNROLL
      for (int j = 0; j < N; ++j) s += v[p][j];
    }
    const C mu = warp_all_reduce(s, add) / static_cast<C>(d);
    C q = 0;
    TESSERA_UNROLL
    for (int p = 0; p < P; ++p) {
      TESSERA_UNROLL
      for (int j = 0; j < N; ++j) {
        v[p][j] -= mu;
        if (in_warp_row<T>(p, d)) q += v[p][j] * v[p][j];
      }
    }
    const C rs = C(1) / ::sqrt(warp_all_reduce(q, add) / static_cast<C>(d) + static_cast<C>(eps));
    TESSERA_UNROLL
    for (int p = 0; p < P; ++p) {
      TESSERA_UNROLL
      for (int j = 0; j < N; ++j) {
        C val = v[p][j] * rs;
        if (gamma) val *= g[p][j];
        if (beta) val += b[p][j];
        v[p][j] = val;
      }
    }
    store_warp_row<T, P>(y + r * d, d, v);
    if (gpu::lane() == 0) mean[r] = static_cast<S>(mu), rstd[r] = static_cast<S>(rs);
  }
}

// The input gradient of rows that fit a warp's registers: g and x read once.
template <class T, class S, int P>
TESSERA_GLOBAL void ln_bwd_dx_warp_kernel(int64_t rows, int64_t d, const T* g, const T* x, const T* gamma, const S* mean, const S* rstd,
                                          T* dx) {
  using C = compute_t<T>;
  constexpr int N = kPack<T>;
  const auto add = [](C a, C b) { return a + b; };
  C w[P][N] = {};
  if (gamma) load_warp_row<T, P>(gamma, d, C(0), w);
  for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
    const C mu = static_cast<C>(mean[r]), rs = static_cast<C>(rstd[r]);
    C gv[P][N], xh[P][N];
    load_warp_row<T, P>(g + r * d, d, C(0), gv);
    load_warp_row<T, P>(x + r * d, d, C(0), xh);
    C a = 0, b = 0;
    TESSERA_UNROLL
    for (int p = 0; p < P; ++p) {
      TESSERA_UNROLL
      for (int j = 0; j < N; ++j) {
        if (gamma) gv[p][j] *= w[p][j];  // dxh
        xh[p][j] = (xh[p][j] - mu) * rs;
        a += gv[p][j];
        b += gv[p][j] * xh[p][j];
      }
    }
    a = warp_all_reduce(a, add) / static_cast<C>(d);
    b = warp_all_reduce(b, add) / static_cast<C>(d);
    TESSERA_UNROLL
    for (int p = 0; p < P; ++p) {
      TESSERA_UNROLL
      for (int j = 0; j < N; ++j) gv[p][j] = rs * (gv[p][j] - a - xh[p][j] * b);
    }
    store_warp_row<T, P>(dx + r * d, d, gv);
  }
}

template <class T, class S>
TESSERA_GLOBAL void ln_bwd_dx_kernel(int64_t rows, int64_t d, const T* g, const T* x, const T* gamma, const S* mean, const S* rstd, T* dx) {
  using C = compute_t<T>;
  TESSERA_SHARED_ARRAY(C, smem, kThreads);
  for (int64_t r = block_x(); r < rows; r += grid_dim_x()) {
    const C mu = static_cast<C>(mean[r]), rs = static_cast<C>(rstd[r]);
    C a = 0, b = 0;
    for (int64_t j = thread_x(); j < d; j += block_dim_x()) {
      const C dxh = ld(g, r * d + j) * (gamma ? ld(gamma, j) : C(1));
      a += dxh;
      b += dxh * (ld(x, r * d + j) - mu) * rs;
    }
    a = block_sum(a, smem) / static_cast<C>(d);
    b = block_sum(b, smem) / static_cast<C>(d);
    for (int64_t j = thread_x(); j < d; j += block_dim_x()) {
      const C dxh = ld(g, r * d + j) * (gamma ? ld(gamma, j) : C(1));
      dx[r * d + j] = static_cast<T>(static_cast<compute_t<T>>(rs * (dxh - a - (ld(x, r * d + j) - mu) * rs * b)));
    }
  }
}

// dgamma/dbeta: threads over (chunk of rows, column), columns fastest (coalesced rows), each
// summing its chunk in row order; with several chunks a second pass adds the chunks in order.
// Chunks depend only on the shape, so the result is deterministic. (One thread per column
// walking every row gave d / 256 blocks: 4 for d = 1024.)
template <class T, class S>
TESSERA_GLOBAL void ln_bwd_params_kernel(int64_t rows, int64_t d, int64_t chunks, int64_t chunk_rows, const T* g, const T* x, const S* mean,
                                         const S* rstd, compute_t<T>* partial, T* dgamma, T* dbeta) {
  using C = compute_t<T>;
  for (int64_t i = global_index(); i < chunks * d; i += grid_stride()) {
    const int64_t j = i % d, chunk = i / d, r0 = chunk * chunk_rows, r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    C sg = 0, sb = 0;
    for (int64_t r = r0; r < r1; ++r) {
      sg += ld(g, r * d + j) * (ld(x, r * d + j) - static_cast<C>(mean[r])) * static_cast<C>(rstd[r]);
      sb += ld(g, r * d + j);
    }
    if (chunks == 1) {
      dgamma[j] = static_cast<T>(sg);
      dbeta[j] = static_cast<T>(sb);
    } else {
      partial[i] = sg;
      partial[chunks * d + i] = sb;
    }
  }
}
template <class T>
TESSERA_GLOBAL void ln_bwd_params_merge_kernel(int64_t d, int64_t chunks, const compute_t<T>* partial, T* dgamma, T* dbeta) {
  using C = compute_t<T>;
  for (int64_t j = global_index(); j < d; j += grid_stride()) {
    C sg = 0, sb = 0;
    for (int64_t k = 0; k < chunks; ++k) sg += partial[k * d + j], sb += partial[chunks * d + k * d + j];
    dgamma[j] = static_cast<T>(sg);
    dbeta[j] = static_cast<T>(sb);
  }
}

// Fused cross entropy, a warp per row: lanes stride over the classes (coalesced), max and sum
// of exponentials combine by warp shuffles in the compute type. A target out of range is
// reported through the device error slot (no host sync) and its row's loss is NaN.
template <class T, class I>
TESSERA_GLOBAL void cross_entropy_kernel(int64_t n, int64_t c, const T* x, const I* target, T* loss, T* logp, double eps, int64_t ignore,
                                         DeviceErrorSlot* errors, int code) {
  using C = compute_t<T>;
  const int64_t lane = static_cast<int64_t>(gpu::lane()), width = warp_size();
  const auto ld = [](const T* p, int64_t i) { return static_cast<C>(p[i]); };
  for (int64_t r = warp_row(); r < n; r += warp_rows_stride()) {
    const T* row = x + r * c;
    C mx = -INFINITY;
    for (int64_t j = lane; j < c; j += width) mx = ld(row, j) > mx ? ld(row, j) : mx;
    mx = warp_all_reduce(mx, [](C a, C b) { return a > b ? a : b; });
    if (mx == C(INFINITY) || mx == C(-INFINITY)) mx = 0;
    C s = 0;
    for (int64_t j = lane; j < c; j += width) s += ::exp(ld(row, j) - mx);
    s = warp_all_reduce(s, [](C a, C b) { return a + b; });
    const C lse = mx + ::log(s);
    C sum_logp = 0;
    for (int64_t j = lane; j < c; j += width) {
      const C v = ld(row, j) - lse;
      logp[r * c + j] = static_cast<T>(v);
      sum_logp += v;
    }
    sum_logp = warp_all_reduce(sum_logp, [](C a, C b) { return a + b; });
    if (lane != 0) continue;
    const int64_t t = static_cast<int64_t>(target[r]);
    if (t == ignore) {
      loss[r] = static_cast<T>(C(0));
    } else if (t < 0 || t >= c) {
      report_device_error(errors, code, kClassTargetOutOfRange, t, c, r);
      loss[r] = static_cast<T>(C(NAN));
    } else {
      const C l = -((C(1) - C(eps)) * (ld(row, t) - lse) + C(eps) / static_cast<C>(c) * sum_logp);
      loss[r] = static_cast<T>(l);
    }
  }
}

template <class T> using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
template <class T> const T* opt(const Tensor& t) { return t.defined() ? ptr<const T>(t) : nullptr; }
Grid row_grid(int64_t rows) { return Grid{static_cast<unsigned>(std::clamp<int64_t>(rows, 1, 4096))}; }

void bn_fwd(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  backend_common::dispatch_float(x.dtype(), "batch_norm", [&]<class T>() {
    launch(bn_fwd_kernel<T, stat_t<T>>, row_grid(x.size(1)), Grid{kThreads}, 0, true, x.size(0), x.size(1), x.size(2), ptr<const T>(x),
           opt<T>(c.inputs[1]), opt<T>(c.inputs[2]), ptr<T>(c.outputs[0]), ptr<stat_t<T>>(c.outputs[1]), ptr<stat_t<T>>(c.outputs[2]),
           c.attrs.eps);
  });
}
void bn_bwd(const KernelCall& c) {
  const Tensor& x = c.inputs[1];
  backend_common::dispatch_float(x.dtype(), "batch_norm_backward", [&]<class T>() {
    launch(bn_bwd_kernel<T, stat_t<T>>, row_grid(x.size(1)), Grid{kThreads}, 0, true, x.size(0), x.size(1), x.size(2),
           ptr<const T>(c.inputs[0]), ptr<const T>(x), opt<T>(c.inputs[2]), ptr<const stat_t<T>>(c.inputs[3]),
           ptr<const stat_t<T>>(c.inputs[4]), ptr<T>(c.outputs[0]), ptr<T>(c.outputs[1]), ptr<T>(c.outputs[2]));
  });
}
void ln_fwd(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  backend_common::dispatch_float(x.dtype(), "layer_norm", [&]<class T>() {
    const int64_t rows = x.size(0), d = x.size(1);
    const bool vec = warp_rows_vectorised<T>(d, {x.data_ptr(), opt<T>(c.inputs[1]), opt<T>(c.inputs[2]), c.outputs[0].data_ptr()});
    const bool in_registers = with_warp_row_packs<T>(d, vec, [&](auto packs) {
      launch(ln_fwd_warp_kernel<T, stat_t<T>, decltype(packs)::value>, warp_row_blocks(rows), Grid{kThreads}, 0, true, rows, d,
             ptr<const T>(x), opt<T>(c.inputs[1]), opt<T>(c.inputs[2]), ptr<T>(c.outputs[0]), ptr<stat_t<T>>(c.outputs[1]),
             ptr<stat_t<T>>(c.outputs[2]), c.attrs.eps);
    });
    if (in_registers) return;
    launch(ln_fwd_kernel<T, stat_t<T>>, row_grid(rows), Grid{kThreads}, 0, true, rows, d, ptr<const T>(x), opt<T>(c.inputs[1]),
           opt<T>(c.inputs[2]), ptr<T>(c.outputs[0]), ptr<stat_t<T>>(c.outputs[1]), ptr<stat_t<T>>(c.outputs[2]), c.attrs.eps);
  });
}
void ln_bwd(const KernelCall& c) {
  const Tensor& x = c.inputs[1];
  backend_common::dispatch_float(x.dtype(), "layer_norm_backward", [&]<class T>() {
    using S = stat_t<T>;
    const bool vec =
        warp_rows_vectorised<T>(x.size(1), {c.inputs[0].data_ptr(), x.data_ptr(), opt<T>(c.inputs[2]), c.outputs[0].data_ptr()});
    const bool in_registers = with_warp_row_packs<T>(x.size(1), vec, [&](auto packs) {
      launch(ln_bwd_dx_warp_kernel<T, S, decltype(packs)::value>, warp_row_blocks(x.size(0)), Grid{kThreads}, 0, true, x.size(0), x.size(1),
             ptr<const T>(c.inputs[0]), ptr<const T>(x), opt<T>(c.inputs[2]), ptr<const S>(c.inputs[3]), ptr<const S>(c.inputs[4]),
             ptr<T>(c.outputs[0]));
    });
    if (!in_registers) {
      launch(ln_bwd_dx_kernel<T, S>, row_grid(x.size(0)), Grid{kThreads}, 0, true, x.size(0), x.size(1), ptr<const T>(c.inputs[0]),
             ptr<const T>(x), opt<T>(c.inputs[2]), ptr<const S>(c.inputs[3]), ptr<const S>(c.inputs[4]), ptr<T>(c.outputs[0]));
    }
    // Enough (chunk, column) threads to fill a large GPU (>= 64K), each chunk at least 32 rows.
    const int64_t rows = x.size(0), d = x.size(1);
    const int64_t chunks = std::clamp<int64_t>(std::min((65536 + d - 1) / std::max<int64_t>(d, 1), rows / 32), 1, 1024);
    const int64_t chunk_rows = (rows + chunks - 1) / chunks;
    using C = compute_t<T>;
    const Tensor partial = empty({chunks > 1 ? 2 * chunks * d * static_cast<int64_t>(sizeof(C)) : 1}, DType::u8, x.device());
    launch(ln_bwd_params_kernel<T, S>, blocks_for(chunks * d), Grid{kThreads}, 0, false, rows, d, chunks, chunk_rows, ptr<const T>(c.inputs[0]),
           ptr<const T>(x), ptr<const S>(c.inputs[3]), ptr<const S>(c.inputs[4]), ptr<C>(partial), ptr<T>(c.outputs[1]), ptr<T>(c.outputs[2]));
    if (chunks > 1) {
      launch(ln_bwd_params_merge_kernel<T>, blocks_for(d), Grid{kThreads}, 0, false, d, chunks, ptr<const C>(partial), ptr<T>(c.outputs[1]),
             ptr<T>(c.outputs[2]));
    }
  });
}
// One thread per logit (coalesced over the row); the row's gradient and target are broadcast reads.
template <class T, class I>
TESSERA_GLOBAL void cross_entropy_backward_kernel(int64_t n, int64_t classes, const T* g, const T* logp, const I* target, T* out,
                                                  double eps, int64_t ignore) {
  for (int64_t i = global_index(); i < n * classes; i += grid_stride()) {
    const int64_t r = i / classes;
    out[i] = backend_common::cross_entropy_grad_at(logp[i], g[r], static_cast<int64_t>(target[r]), i - r * classes, ignore, eps, classes);
  }
}

void cross_entropy_backward_op(const KernelCall& c) {
  const Tensor& logp = c.inputs[1];
  const int64_t n = logp.size(0), classes = logp.size(1);
  backend_common::dispatch_float(logp.dtype(), "cross_entropy_backward", [&]<class T>() {
    auto run = [&]<class I>() {
      launch(cross_entropy_backward_kernel<T, I>, blocks_for(n * classes), Grid{kThreads}, 0, false, n, classes, ptr<const T>(c.inputs[0]),
             ptr<const T>(logp), ptr<const I>(c.inputs[2]), ptr<T>(c.outputs[0]), c.attrs.label_smoothing, c.attrs.ignore_index);
    };
    if (c.inputs[2].dtype() == DType::i32) run.template operator()<int32_t>();
    else run.template operator()<int64_t>();
  });
}

void cross_entropy_op(const KernelCall& c) {
  const Tensor& logits = c.inputs[0];
  const Tensor& target = c.inputs[1];
  const int64_t n = logits.size(0), classes = logits.size(1), ignore = c.attrs.ignore_index;
  DeviceErrorSlot* errors = device_error_slot(logits.device().index);
  backend_common::dispatch_float(logits.dtype(), "cross_entropy", [&]<class T>() {
    auto run = [&]<class I>() {
      launch(cross_entropy_kernel<T, I>, warp_row_blocks(n), Grid{kThreads}, 0, true, n, classes, ptr<const T>(logits),
             ptr<const I>(target), ptr<T>(c.outputs[0]), ptr<T>(c.outputs[1]), c.attrs.label_smoothing, ignore, errors,
             device_error_code(OpId::CrossEntropy));
    };
    if (target.dtype() == DType::i32) run.template operator()<int32_t>();
    else run.template operator()<int64_t>();
  });
}
}  // namespace

void register_norm_kernels(KernelTable& table) {
  table[OpId::BatchNorm] = &bn_fwd;
  table[OpId::BatchNormBackward] = &bn_bwd;
  table[OpId::LayerNorm] = &ln_fwd;
  table[OpId::LayerNormBackward] = &ln_bwd;
  table[OpId::CrossEntropy] = &cross_entropy_op;
  table[OpId::CrossEntropyBackward] = &cross_entropy_backward_op;
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
