// Reductions, arg-reductions, cumsum and softmax over [rows, len] row layouts
// (backends/common/row_layout.h). A team reduces each row with the shared core/kernels
// reducers, so results are deterministic for a given shape and team size.
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

template <class Op, class T> void reduce_rows(const char* name, int64_t rows, int64_t len, const T* in, T* out) {
  if (rows <= 0) return;
  Kokkos::parallel_for(name, rows_policy(rows), KOKKOS_LAMBDA(const Team& team) {
    const int64_t r = team.league_rank();
    typename Op::Acc acc = Op::init();
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, len), [&](int64_t j, typename Op::Acc& a) { a = Op::step(a, in[r * len + j]); },
        FunctorReducer<Op>(acc));
    Kokkos::single(Kokkos::PerTeam(team), [&] { out[r] = Op::finish(acc); });
  });
}

template <template <class> class Op> void reduce_op(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  Tensor& out = c.outputs[0];
  std::vector<int64_t> order;
  const Tensor rows = as_rows(x, c.attrs.axes, order);
  const int64_t nrows = out.numel(), len = x.numel() ? numel(x.shape()) / std::max<int64_t>(nrows, 1) : 0;
  auto run = [&]<class T>() { reduce_rows<Op<T>>(op_name(c.op).data(), nrows, len, ptr<const T>(rows), ptr<T>(out)); };
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
  for_n(name, rows.size(0), KOKKOS_LAMBDA(int64_t r) { out[r] = backend_common::arg_extreme_row<T, kMax>(in + r * len, len); });
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
  for_n("cumsum", rows.size(0), KOKKOS_LAMBDA(int64_t r) {
    auto acc = Sum::init();
    for (int64_t j = 0; j < len; ++j) {
      acc = Sum::step(acc, in[r * len + j]);
      out[r * len + j] = Sum::finish(acc);
    }
  });
}

void cumsum_op(const KernelCall& c) {
  backend_common::dispatch_numeric(c.inputs[0].dtype(), "cumsum", [&]<class T>() {
    along_axis(c, [&](const Tensor& rows, Tensor& res) { cumsum_rows<T>(rows, res); });
  });
}

// Max that propagates NaN, as a reducer for the softmax shift.
struct NanMax {
  using Acc = double;
  static KOKKOS_INLINE_FUNCTION double init() { return -INFINITY; }
  static KOKKOS_INLINE_FUNCTION double merge(double a, double b) { return (a != a) ? a : (b != b) ? b : (b > a ? b : a); }
};

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
    double mx = NanMax::init();
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, len), [&](int64_t j, double& m) { m = NanMax::merge(m, ld(x, j)); }, FunctorReducer<NanMax>(mx));
    if (mx == -INFINITY) mx = 0;  // all -inf rows: shift by 0; a +inf max makes the row NaN (PyTorch)
    const C shift = static_cast<C>(mx);
    constexpr bool kKeep = !kLog && std::is_same_v<T, C>;
    const double s = team_sum(team, len, [&](int64_t j) {
      const C e = kmath::exp(static_cast<C>(x[j]) - shift);
      if constexpr (kKeep) y[j] = e;
      return static_cast<double>(e);
    });
    team.team_barrier();  // the stores above happen before any thread scales them
    if constexpr (kLog) {
      const C log_s = static_cast<C>(kmath::log(s));
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, len),
                           [&](int64_t j) { y[j] = static_cast<T>(static_cast<C>(x[j]) - shift - log_s); });
    } else {
      const C inv = static_cast<C>(1.0 / s);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, len), [&](int64_t j) {
        if constexpr (kKeep) y[j] *= inv;
        else y[j] = static_cast<T>(kmath::exp(static_cast<C>(x[j]) - shift) * inv);
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
