// Reductions, arg-reductions, cumsum and softmax. The host lays the reduced axes out as the
// rows of a contiguous [rows, len] tensor (a copy only when they are not already last and
// dense); a block reduces each row with a shared-memory tree finished by warp shuffles, so the
// result is deterministic for a given shape.
#include <cmath>
#include <numeric>

#include "../common/row_layout.h"
#include "../common/row_math.h"
#include "common.h"
#include "kernels.h"
#include "tessera/kernels/convert.h"
#include "tessera/kernels/reduce.h"
#include "tessera/ops/creation.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {
namespace {
using backend_common::along_axis;
using backend_common::as_rows;

template <class T> using SumOp = kernels::SumReducer<T>;
template <class T> using ProdOp = kernels::ProdReducer<T>;
template <class T> using MaxOp = kernels::MaxReducer<T>;
template <class T> using MinOp = kernels::MinReducer<T>;

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
    Acc acc = Op::init();
    for (int64_t j = thread_x(); j < len; j += block_dim_x()) acc = Op::step(acc, in[r * len + j]);
    acc = block_reduce(acc, Op{}, smem);
    if (thread_x() == 0) out[r] = Op::finish(acc);
  }
}

template <class T, bool kMax> TESSERA_GLOBAL void arg_rows_kernel(int64_t rows, int64_t len, const T* in, int64_t* out) {
  for (int64_t r = global_index(); r < rows; r += grid_stride()) out[r] = backend_common::arg_extreme_row<T, kMax>(in + r * len, len);
}

template <class T> TESSERA_GLOBAL void cumsum_rows_kernel(int64_t rows, int64_t len, const T* in, T* out) {
  for (int64_t r = global_index(); r < rows; r += grid_stride()) {
    auto acc = SumOp<T>::init();
    for (int64_t j = 0; j < len; ++j) {
      acc = SumOp<T>::step(acc, in[r * len + j]);
      out[r * len + j] = SumOp<T>::finish(acc);
    }
  }
}

template <class T> struct MaxC {
  TESSERA_HD double operator()(double a, double b) const { return (a != a) ? a : (b != b) ? b : (b > a ? b : a); }
};
struct AddD {
  TESSERA_HD double operator()(double a, double b) const { return a + b; }
};

template <class T, bool kLog> TESSERA_GLOBAL void softmax_rows_kernel(int64_t rows, int64_t len, const T* in, T* out) {
  TESSERA_SHARED_ARRAY(double, smem, kThreads);
  for (int64_t r = block_x(); r < rows; r += grid_dim_x()) {
    double mx = -INFINITY;
    for (int64_t j = thread_x(); j < len; j += block_dim_x()) mx = MaxC<T>{}(mx, static_cast<double>(static_cast<compute_t<T>>(in[r * len + j])));
    mx = block_reduce(mx, MaxC<T>{}, smem);
    if (mx == INFINITY || mx == -INFINITY) mx = 0;  // all -inf rows: shift by 0, not inf
    double s = 0;
    for (int64_t j = thread_x(); j < len; j += block_dim_x()) s += ::exp(static_cast<double>(static_cast<compute_t<T>>(in[r * len + j])) - mx);
    s = block_reduce(s, AddD{}, smem);
    for (int64_t j = thread_x(); j < len; j += block_dim_x()) {
      const double x = static_cast<double>(static_cast<compute_t<T>>(in[r * len + j])) - mx;
      out[r * len + j] = static_cast<T>(static_cast<compute_t<T>>(kLog ? x - ::log(s) : ::exp(x) / s));
    }
  }
}

Grid row_blocks(int64_t rows) { return Grid{static_cast<unsigned>(std::clamp<int64_t>(rows, 1, 4096))}; }

template <template <class> class Op> void reduce_op(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  Tensor& out = c.outputs[0];
  std::vector<int64_t> order;
  const Tensor rows = as_rows(x, c.attrs.axes, order);
  const int64_t nrows = out.numel(), len = numel(x.shape()) / std::max<int64_t>(nrows, 1);
  auto run = [&]<class T>() {
    launch(reduce_rows_kernel<T, Op<T>>, row_blocks(nrows), Grid{kThreads}, 0, true, nrows, x.numel() ? len : 0,
           ptr<const T>(rows), ptr<T>(out));
  };
  if constexpr (std::is_same_v<Op<float>, MaxOp<float>> || std::is_same_v<Op<float>, MinOp<float>>) {
    backend_common::dispatch_all(x.dtype(), op_name(c.op).data(), run);
  } else {
    backend_common::dispatch_numeric(x.dtype(), op_name(c.op).data(), run);
  }
}

template <bool kMax> void arg_op(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  std::vector<int64_t> order;
  const Tensor rows = as_rows(x, {c.attrs.axis}, order);
  backend_common::dispatch_numeric(x.dtype(), op_name(c.op).data(), [&]<class T>() {
    launch(arg_rows_kernel<T, kMax>, blocks_for(rows.size(0)), Grid{kThreads}, 0, false, rows.size(0), rows.size(1),
           ptr<const T>(rows), ptr<int64_t>(c.outputs[0]));
  });
}

void cumsum_op(const KernelCall& c) {
  backend_common::dispatch_numeric(c.inputs[0].dtype(), "cumsum", [&]<class T>() {
    along_axis(c, [&](const Tensor& rows, Tensor& res) {
      launch(cumsum_rows_kernel<T>, blocks_for(rows.size(0)), Grid{kThreads}, 0, false, rows.size(0), rows.size(1),
             ptr<const T>(rows), ptr<T>(res));
    });
  });
}

template <bool kLog> void softmax_op(const KernelCall& c) {
  backend_common::dispatch_float(c.inputs[0].dtype(), op_name(c.op).data(), [&]<class T>() {
    along_axis(c, [&](const Tensor& rows, Tensor& res) {
      launch(softmax_rows_kernel<T, kLog>, row_blocks(rows.size(0)), Grid{kThreads}, 0, true, rows.size(0), rows.size(1),
             ptr<const T>(rows), ptr<T>(res));
    });
  });
}
}  // namespace

void register_reductions(KernelTable& table) {
  table[OpId::Sum] = &reduce_op<SumOp>;
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
