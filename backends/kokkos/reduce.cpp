// Reductions, arg-reductions, cumsum and softmax over [rows, len] row layouts
// (backends/common/row_layout.h). A team reduces each row with the shared core/kernels
// reducers, so results are deterministic for a given shape and team size.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "../common/row_layout.h"
#include "../common/row_math.h"
#include "common.h"
#include "tessera/kernels/reduce.h"

namespace tessera::kokkos {
namespace {
using backend_common::along_axis;
using backend_common::as_rows;

// Rows longer than this, when there are too few rows to occupy the space, are split into
// chunks of this many elements, reduced in parallel and merged per row in chunk order: a
// whole-tensor sum was one team (one thread on a host space). The chunking depends on the
// shape only, so the result is the same for any number of threads.
constexpr int64_t kChunk = 65536;

template <class Op, class T> void reduce_rows(const char* name, int64_t rows, int64_t len, const T* in, T* out) {
  if (rows <= 0) return;
  using Acc = typename Op::Acc;
  const int64_t chunks = (len + kChunk - 1) / kChunk;
  if (rows >= 64 || chunks < 2) {
    if constexpr (kHostExec) {
      if (rows * len < kHostInlineBelow) {  // small: inline, as for_n does
        for (int64_t r = 0; r < rows; ++r) {
          Acc acc = Op::init();
          for (int64_t j = 0; j < len; ++j) acc = Op::step(acc, in[r * len + j]);
          out[r] = Op::finish(acc);
        }
        return;
      }
    }
    Kokkos::parallel_for(
        name, rows_policy(rows), KOKKOS_LAMBDA(const Team& team) {
          const T* x = in + team.league_rank() * len;
          const Acc acc = team_reduce_span<Op>(team, x, len);
          Kokkos::single(Kokkos::PerTeam(team), [&] { out[team.league_rank()] = Op::finish(acc); });
        });
    return;
  }
  Kokkos::View<Acc*, Mem> partial(Kokkos::ViewAllocateWithoutInitializing("tessera::reduce_partials"), rows * chunks);
  Kokkos::parallel_for(
      name, rows_policy(rows * chunks), KOKKOS_LAMBDA(const Team& team) {
        const int64_t r = team.league_rank() / chunks, c = team.league_rank() % chunks;
        const int64_t lo = c * kChunk, n = len - lo < kChunk ? len - lo : kChunk;
        const T* x = in + r * len + lo;
        const Acc acc = team_reduce_span<Op>(team, x, n);
        Kokkos::single(Kokkos::PerTeam(team), [&] { partial(team.league_rank()) = acc; });
      });
  for_n(
      name, rows,
      KOKKOS_LAMBDA(int64_t r) {
        Acc acc = Op::init();
        for (int64_t c = 0; c < chunks; ++c) acc = Op::merge(acc, partial(r * chunks + c));
        out[r] = Op::finish(acc);
      },
      chunks);
}

// Reduction over the leading `len` rows of a dense [len, cols] block (a bias gradient): each
// column accumulates down the rows in order. Host: a thread takes 64 adjacent columns, so the
// row loop is a unit-stride vector loop; GPU: a thread per column, adjacent threads adjacent
// columns. No transposed copy (as_rows' permute) and the same order for any thread count.
template <class Op, class T>
void reduce_columns(const char* name, int64_t len, int64_t cols, const T* in, T* out) {
  using Acc = typename Op::Acc;
  constexpr int64_t kBlock = kHostExec ? 64 : 1;
  const auto block = KOKKOS_LAMBDA(int64_t b) {
    const int64_t c0 = b * kBlock, w = cols - c0 < kBlock ? cols - c0 : kBlock;
    Acc acc[kBlock];
    for (int64_t l = 0; l < kBlock; ++l) acc[l] = Op::init();
    if (w == kBlock) {
      for (int64_t r = 0; r < len; ++r) {
        for (int64_t l = 0; l < kBlock; ++l) acc[l] = Op::step(acc[l], in[r * cols + c0 + l]);
      }
    } else {
      for (int64_t r = 0; r < len; ++r) {
        for (int64_t l = 0; l < w; ++l) acc[l] = Op::step(acc[l], in[r * cols + c0 + l]);
      }
    }
    for (int64_t l = 0; l < w; ++l) out[c0 + l] = Op::finish(acc[l]);
  };
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  if constexpr (kHostExec) {
    if (len * cols < kHostInlineBelow || blocks < 2) {
      for (int64_t b = 0; b < blocks; ++b) block(b);
      return;
    }
  }
  Kokkos::parallel_for(name, Kokkos::RangePolicy<Exec, Kokkos::IndexType<int64_t>>(0, blocks), block);
}

/** True when `axes` are the leading axes 0..k-1 of contiguous x and leave at least one axis. */
bool leading_axes(const Tensor& x, const std::vector<int64_t>& axes) {
  if (!x.is_contiguous() || axes.empty() || static_cast<int64_t>(axes.size()) >= x.dim()) return false;
  std::vector<int64_t> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

template <template <class> class Op> void reduce_op(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  Tensor& out = c.outputs[0];
  const int64_t nrows = out.numel(), len = x.numel() ? numel(x.shape()) / std::max<int64_t>(nrows, 1) : 0;
  const bool columns = len > 1 && nrows > 1 && leading_axes(x, c.attrs.axes);
  std::vector<int64_t> order;
  const Tensor rows = columns ? x : as_rows(x, c.attrs.axes, order);
  auto run = [&]<class T>() {
    if (columns) reduce_columns<Op<T>>(op_name(c.op).data(), len, nrows, ptr<const T>(rows), ptr<T>(out));
    else reduce_rows<Op<T>>(op_name(c.op).data(), nrows, len, ptr<const T>(rows), ptr<T>(out));
  };
  if constexpr (std::is_same_v<Op<float>, kernels::MaxReducer<float>> || std::is_same_v<Op<float>, kernels::MinReducer<float>>) {
    backend_common::dispatch_all(x.dtype(), op_name(c.op).data(), run);
  } else {
    backend_common::dispatch_numeric(x.dtype(), op_name(c.op).data(), run);
  }
}

// First index of the extreme value; a NaN wins and stops the scan (torch semantics). The
// kernel bodies are named templates: nvcc allows no device lambda inside a generic lambda.
template <class T, bool kMax> void arg_rows(const char* name, const Tensor& rows, int64_t* out) {
  const T* in = ptr<const T>(rows);
  const int64_t len = rows.size(1);
  for_n(
      name, rows.size(0), KOKKOS_LAMBDA(int64_t r) { out[r] = backend_common::arg_extreme_row<T, kMax>(in + r * len, len); }, len);
}

template <bool kMax> void arg_op(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  std::vector<int64_t> order;
  const Tensor rows = as_rows(x, {c.attrs.axis}, order);
  backend_common::dispatch_numeric(x.dtype(), op_name(c.op).data(),
                                   [&]<class T>() { arg_rows<T, kMax>(op_name(c.op).data(), rows, ptr<int64_t>(c.outputs[0])); });
}

template <class T> void cumsum_rows(const Tensor& rows, Tensor& res) {
  const T* in = ptr<const T>(rows);
  T* out = ptr<T>(res);
  const int64_t len = rows.size(1);
  using Sum = kernels::SumReducer<T>;
  for_n(
      "cumsum", rows.size(0),
      KOKKOS_LAMBDA(int64_t r) {
        auto acc = Sum::init();
        for (int64_t j = 0; j < len; ++j) {
          acc = Sum::step(acc, in[r * len + j]);
          out[r * len + j] = Sum::finish(acc);
        }
      },
      len);
}

void cumsum_op(const KernelCall& c) {
  backend_common::dispatch_numeric(c.inputs[0].dtype(), "cumsum", [&]<class T>() {
    along_axis(c, [&](const Tensor& rows, Tensor& res) { cumsum_rows<T>(rows, res); });
  });
}

// The exponentials in the compute type (float for f32: double exp was most of the time), the
// row sum in double. f32/f64 rows keep exp(x - max) in the output and scale it in place; 16-bit
// rows recompute it, since rounding it to 16 bits first would round the result twice.
template <class T, bool kLog> void softmax_rows(const char* name, const Tensor& rows, Tensor& res) {
  using C = compute_t<T>;
  const T* in = ptr<const T>(rows);
  T* out = ptr<T>(res);
  const int64_t len = rows.size(1);
  if (rows.size(0) == 0) return;
  Kokkos::parallel_for(name, rows_policy(rows.size(0)), KOKKOS_LAMBDA(const Team& team) {
    const T* x = in + team.league_rank() * len;
    T* y = out + team.league_rank() * len;
    // The row maximum in the compute type (NaN-sticky, as the softmax of a row with a NaN is NaN).
    using Max = kernels::MaxReducer<T>;
    double mx = static_cast<double>(team_reduce_span<Max>(team, x, len));
    if (mx == -INFINITY) mx = 0;  // all -inf rows: shift by 0; a +inf max makes the row NaN (PyTorch)
    const C shift = static_cast<C>(mx);
    constexpr bool kKeep = !kLog && std::is_same_v<T, C>;
    const double s = team_sum(team, len, [&](int64_t j) {
      const C e = fast_exp_nonpos(static_cast<C>(x[j]) - shift);
      if constexpr (kKeep) y[j] = e;
      return static_cast<double>(e);
    });
    team.team_barrier();  // the stores above happen before any thread scales them
    if constexpr (kLog) {
      const C log_s = static_cast<C>(kmath::log(s));
      team_vector_for(team, len, [&](int64_t j) { y[j] = static_cast<T>(static_cast<C>(x[j]) - shift - log_s); });
    } else {
      const C inv = static_cast<C>(1.0 / s);
      team_vector_for(team, len, [&](int64_t j) {
        if constexpr (kKeep) y[j] *= inv;
        else y[j] = static_cast<T>(fast_exp_nonpos(static_cast<C>(x[j]) - shift) * inv);
      });
    }
  });
}

template <bool kLog> void softmax_op(const KernelCall& c) {
  backend_common::dispatch_float(c.inputs[0].dtype(), op_name(c.op).data(), [&]<class T>() {
    along_axis(c, [&](const Tensor& rows, Tensor& res) { softmax_rows<T, kLog>(op_name(c.op).data(), rows, res); });
  });
}
}  // namespace

void register_reductions(KernelTable& table) {
  table[OpId::Sum] = &reduce_op<kernels::SumReducer>;
  table[OpId::Prod] = &reduce_op<kernels::ProdReducer>;
  table[OpId::Max] = &reduce_op<kernels::MaxReducer>;
  table[OpId::Min] = &reduce_op<kernels::MinReducer>;
  table[OpId::Argmax] = &arg_op<true>;
  table[OpId::Argmin] = &arg_op<false>;
  table[OpId::Cumsum] = &cumsum_op;
  table[OpId::Softmax] = &softmax_op<false>;
  table[OpId::LogSoftmax] = &softmax_op<true>;
}

}  // namespace tessera::kokkos
