#pragma once
// Helpers shared by the Kokkos kernel files. Kernels run on Kokkos::DefaultExecutionSpace and
// read tensor memory through raw pointers in its memory space. Flat loops use RangePolicy;
// row-wise kernels use one team per row with TeamThreadRange loops and team reductions, so
// they are correct for any team size (1 on Serial, hundreds of threads on CUDA/HIP).
#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <type_traits>

#include "../common/dtype_dispatch.h"
#include "../common/indexer.h"
#include "tessera/backend/kernel.h"
#include "tessera/kernels/activation.h"
#include "tessera/kernels/half.h"
#include "tessera/kernels/reduce.h"
#include "tessera/kernels/unary.h"
#include "tessera/tensor.h"

// Host builds evaluate the float transcendentals with the CPU backend's branch-free polynomials
// (backends/cpu/vec_math.h): glibc's expf/logf/tanhf are scalar calls, which held exp at a
// seventh of the CPU backend's speed and softmax at a ninth. Device compilers keep the
// core/kernels functors (their libdevice/ocml math is vectorised per lane already).
#if !defined(__CUDACC__) && !defined(__HIPCC__) && !defined(__SYCL_DEVICE_ONLY__)
#include "../cpu/vec_math.h"
#define TESSERA_KOKKOS_HOST_VMATH 1
#if defined(__AVX__)  // the kernel files (TESSERA_CPU_ISA_FLAGS); lane_max uses 8-wide GCC vectors
#include "../cpu/lanes.h"
#define TESSERA_KOKKOS_HOST_LANE_MAX 1
#endif
#endif

namespace tessera::kokkos {

using Exec = Kokkos::DefaultExecutionSpace;
using Mem = Exec::memory_space;
using TeamPolicy = Kokkos::TeamPolicy<Exec, Kokkos::IndexType<int64_t>>;
using Team = TeamPolicy::member_type;
using backend_common::Indexer;
using backend_common::make_indexer;
using tessera::compute_t;
// Math functions moved from Kokkos::Experimental (3.x) to Kokkos (3.6+).
#if KOKKOS_VERSION >= 30600
namespace kmath = ::Kokkos;
#else
namespace kmath = ::Kokkos::Experimental;
#endif

template <class T> T* ptr(const Tensor& t) { return static_cast<T*>(t.data_ptr()); }
template <class T> const T* opt(const Tensor& t) { return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr; }

/** Host execution spaces (Serial, OpenMP, Threads): their vector lanes are the compiler's. */
inline constexpr bool kHostExec = Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible;

/**
 * Below this many elements a host space runs a flat loop on the calling thread: waking the
 * OpenMP team costs 3 us with spinning workers and 15-20 us once they sleep (GOMP's default
 * wait policy, measured here), more than a 32K-element add takes on one core; a training step's
 * small bias and loss ops paid it hundreds of times. The CPU backend's grain is the same.
 */
inline constexpr int64_t kHostInlineBelow = 32768;

/**
 * parallel_for over [0, n); the label names the op in Kokkos tools/profilers. `work`: elements
 * each index touches (a row's length, a plane's size), so the inline test sees the whole op.
 */
template <class F>
void for_n(const char* label, int64_t n, const F& f, int64_t work = 1) {
  if (n <= 0) return;
  if constexpr (kHostExec) {
    if (n * work < kHostInlineBelow) {
      for (int64_t i = 0; i < n; ++i) f(i);
      return;
    }
  }
  Kokkos::parallel_for(label, Kokkos::RangePolicy<Exec, Kokkos::IndexType<int64_t>>(0, n), f);
}

/**
 * f(i, j) over a dense rows x cols block: host spaces give each thread whole rows, so a row is
 * a plain loop that vectorises and no element pays a division (small blocks run inline, as in
 * for_n); GPUs run one thread per element.
 */
template <class F>
void for_rows(const char* label, int64_t rows, int64_t cols, const F& f) {
  if (rows <= 0 || cols <= 0) return;
  if constexpr (kHostExec) {
    const auto row = [&](int64_t i) {
      for (int64_t j = 0; j < cols; ++j) f(i, j);
    };
    if (rows * cols < kHostInlineBelow) {
      for (int64_t i = 0; i < rows; ++i) row(i);
    } else {
      Kokkos::parallel_for(label, Kokkos::RangePolicy<Exec, Kokkos::IndexType<int64_t>>(0, rows), row);
    }
  } else {
    Kokkos::parallel_for(
        label, Kokkos::RangePolicy<Exec, Kokkos::IndexType<int64_t>>(0, rows * cols), KOKKOS_LAMBDA(int64_t k) { f(k / cols, k % cols); });
  }
}

/**
 * Team size: Kokkos's choice (AUTO), or TESSERA_KOKKOS_TEAM_SIZE when set: host execution
 * spaces usually pick 1, which hides team-level races and scratch bugs, so the tests force 2+.
 */
inline int forced_team_size() {
  static const int n = [] {
    const char* e = std::getenv("TESSERA_KOKKOS_TEAM_SIZE");
    // Never above the execution space's threads: a host team larger than the pool aborts in Kokkos.
    return e ? std::min(std::atoi(e), Exec().concurrency()) : 0;
  }();
  return n;
}
/** A league of `league` teams, with `vector` lanes per thread and the team size above. */
inline TeamPolicy team_policy(int64_t league, int vector = 1) {
  const int forced = forced_team_size();
  return forced > 0 ? TeamPolicy(league, forced, vector) : TeamPolicy(league, Kokkos::AUTO, vector);
}

/**
 * f(j) for j in [0, n) on the calling thread's vector lanes: ThreadVectorRange on GPUs; on host
 * spaces a plain unit-stride loop, since Kokkos' host ThreadVectorRange (and TeamThreadRange)
 * steps by a run-time increment, and no compiler vectorises a loop of unknown trip count.
 */
template <class F>
KOKKOS_INLINE_FUNCTION void vector_for(const Team& team, int64_t n, const F& f) {
  if constexpr (kHostExec) {
    (void)team;
    for (int64_t j = 0; j < n; ++j) f(j);
  } else {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, n), f);
  }
}

/**
 * f(i) for i in [0, n) on the team's threads and vector lanes: TeamVectorRange on GPUs; on host
 * spaces spans of 256 on TeamThreadRange, each a plain (vectorising) loop.
 */
template <class F>
KOKKOS_INLINE_FUNCTION void team_vector_for(const Team& team, int64_t n, const F& f) {
  if constexpr (kHostExec) {
    constexpr int64_t kSpan = 256;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, (n + kSpan - 1) / kSpan), [&](int64_t s) {
      const int64_t lo = s * kSpan, len = n - lo < kSpan ? n - lo : kSpan;
      for (int64_t j = 0; j < len; ++j) f(lo + j);
    });
  } else {
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, n), f);
  }
}

/**
 * Strided or broadcast operands whose innermost axis is long (>= 32): one team per run of that
 * axis takes the run's offsets once and walks it with TeamThreadRange, so no element pays the
 * linear-index-to-offset divisions. f(off) gets each element's N offsets. Returns false, having
 * run nothing, for contiguous operands (the flat loop is best) and for short runs.
 */
template <int N, class F>
bool for_runs(const char* label, const Indexer<N>& ix, int64_t numel, const F& f) {
  if (ix.contiguous || ix.ndim < 1 || ix.sizes[0] < 32 || numel <= 0) return false;
  const int64_t inner = ix.sizes[0];
  Kokkos::parallel_for(
      label, team_policy(numel / inner, std::min(8, TeamPolicy::vector_length_max())), KOKKOS_LAMBDA(const Team& team) {
        int64_t base[N];
        ix.offsets(team.league_rank() * inner, base);
        team_vector_for(team, inner, [&](int64_t c) {
          int64_t off[N];
          for (int k = 0; k < N; ++k) off[k] = base[k] + c * ix.strides[k][0];
          f(off);
        });
      });
  return true;
}

/**
 * f(run, i, j) over `runs` planes of rows x cols, so a plane's index arithmetic is done once
 * and a row is a plain loop. GPU: one team per plane, its rows on team threads and each row's
 * columns on vector lanes; host: one thread walks the plane and the row loop vectorises.
 */
template <class F>
void for_each_plane(const char* label, int64_t runs, int64_t rows, int64_t cols, const F& f) {
  if (runs <= 0 || rows <= 0 || cols <= 0) return;
  if constexpr (kHostExec) {
    // Host: a plane per iteration of a flat loop. A team per plane cost more to dispatch on
    // OpenMP than a 14x14 plane takes (im2col for a 32-channel 3x3 convolution is 4,320 planes).
    for_n(
        label, runs,
        [=](int64_t run) {
          for (int64_t i = 0; i < rows; ++i) {
            for (int64_t j = 0; j < cols; ++j) f(run, i, j);
          }
        },
        rows * cols);
    return;
  }
  const int vector = std::min(8, TeamPolicy::vector_length_max());
  Kokkos::parallel_for(
      label, team_policy(runs, vector), KOKKOS_LAMBDA(const Team& team) {
        const int64_t run = team.league_rank();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows),
                             [&](int64_t i) { vector_for(team, cols, [&](int64_t j) { f(run, i, j); }); });
      });
}

/** The functor a kernel runs for core/kernels functor Fn: the vectorisable float one on host builds. */
#if defined(TESSERA_KOKKOS_HOST_VMATH)
template <class Fn>
using fast_t = cpu::vmath::fast_t<Fn>;
#else
template <class Fn>
using fast_t = Fn;
#endif
/** e^x for x <= 0 (softmax's exp(x - max)): the host polynomial flushes results below 2^-126 to 0. */
KOKKOS_INLINE_FUNCTION float fast_exp_nonpos(float x) {
#if defined(TESSERA_KOKKOS_HOST_VMATH)
  return cpu::vmath::exp_nonpos(x);
#else
  return kmath::exp(x);
#endif
}
KOKKOS_INLINE_FUNCTION double fast_exp_nonpos(double x) { return kmath::exp(x); }

// The activation and its gradient as compile-time functors (the vectorisable float versions on
// host builds), so each loop carries no per-element switch and vectorises.
template <Activation A>
struct ActOf {
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    return kernels::apply_activation(A, x);
  }
};
template <Activation A>
struct GradOf {
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T g, T saved) const {
    return kernels::activation_grad(A, g, saved);
  }
};
template <>
struct ActOf<Activation::gelu> : fast_t<kernels::GeluFn> {};
template <>
struct ActOf<Activation::gelu_tanh> : fast_t<kernels::GeluTanhFn> {};
template <>
struct ActOf<Activation::silu> : fast_t<kernels::SiluFn> {};
template <>
struct ActOf<Activation::sigmoid> : fast_t<kernels::SigmoidFn> {};
template <>
struct ActOf<Activation::tanh> : fast_t<kernels::TanhFn> {};
#if defined(TESSERA_KOKKOS_HOST_VMATH)
template <>
struct GradOf<Activation::gelu> : cpu::vmath::GeluGradFn {};
template <>
struct GradOf<Activation::gelu_tanh> : cpu::vmath::GeluTanhGradFn {};
template <>
struct GradOf<Activation::silu> : cpu::vmath::SiluGradFn {};
#endif

/** One team per row (league size `rows`). */
inline TeamPolicy rows_policy(int64_t rows) { return team_policy(rows); }

/**
 * A Kokkos reducer over one of the core/kernels reduction functors (SumReducer, ...), so team
 * reductions merge partial results exactly as the other backends do. Both join overloads are
 * given: Kokkos 3.x calls the volatile one, 4.x the plain one.
 */
template <class Op> struct FunctorReducer {
  using reducer = FunctorReducer;
  using value_type = typename Op::Acc;
  using result_view_type = Kokkos::View<value_type, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
  value_type* value;
  KOKKOS_INLINE_FUNCTION explicit FunctorReducer(value_type& v) : value(&v) {}
  KOKKOS_INLINE_FUNCTION void join(value_type& dest, const value_type& src) const { dest = Op::merge(dest, src); }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type& dest, const volatile value_type& src) const {
    const value_type a = dest, b = src;
    dest = Op::merge(a, b);
  }
  KOKKOS_INLINE_FUNCTION void init(value_type& v) const { v = Op::init(); }
  KOKKOS_INLINE_FUNCTION value_type& reference() const { return *value; }
  KOKKOS_INLINE_FUNCTION result_view_type view() const { return result_view_type(value); }
  KOKKOS_INLINE_FUNCTION bool references_scalar() const { return true; }
};

/**
 * Op-reduction of g(acc, j) over j in [0, n) on the calling thread's vector lanes. Host: 16
 * accumulators, element j in lane j % 16, merged pairwise at the end, so the loop vectorises (a
 * single accumulator is one dependent add per element) and the order depends on n only. GPU:
 * a ThreadVectorRange reduction. Op has Acc, init() and merge(a, b); g returns the new Acc.
 */
template <class Op, class G>
KOKKOS_INLINE_FUNCTION typename Op::Acc lane_reduce(const Team& team, int64_t n, const G& g) {
  using Acc = typename Op::Acc;
  if constexpr (kHostExec) {
    (void)team;
    constexpr int kLanes = 16;
    Acc acc[kLanes];
    for (int l = 0; l < kLanes; ++l) acc[l] = Op::init();
    const int64_t full = n / kLanes * kLanes;
    for (int64_t j = 0; j < full; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) acc[l] = g(acc[l], j + l);
    }
    for (int64_t j = full; j < n; ++j) acc[j - full] = g(acc[j - full], j);
    for (int w = kLanes / 2; w > 0; w /= 2) {
      for (int l = 0; l < w; ++l) acc[l] = Op::merge(acc[l], acc[l + w]);
    }
    return acc[0];
  } else {
    Acc r = Op::init();
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, n), [&](int64_t j, Acc& a) { a = g(a, j); }, FunctorReducer<Op>(r));
    return r;
  }
}

/** Host: the Op-merge of span(lo, len) over [0, n) cut into 2048-element spans, the spans spread
 *  over the team's threads (the result depends on n only, not on which thread took which span). */
template <class Op, class S>
KOKKOS_INLINE_FUNCTION typename Op::Acc team_spans(const Team& team, int64_t n, const S& span) {
  using Acc = typename Op::Acc;
  constexpr int64_t kSpan = 2048;
  Acc total = Op::init();
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, (n + kSpan - 1) / kSpan),
      [&](int64_t s, Acc& a) {
        const int64_t lo = s * kSpan;
        a = Op::merge(a, span(lo, n - lo < kSpan ? n - lo : kSpan));
      },
      FunctorReducer<Op>(total));
  return total;
}

/**
 * Op-reduction of g(acc, j) over j in [0, n) across the team; every member gets the result,
 * which depends on n and the team size only. Host: team_spans, each span a lane_reduce. GPU:
 * TeamThreadRange over the elements (the team's threads are the lanes).
 */
template <class Op, class G>
KOKKOS_INLINE_FUNCTION typename Op::Acc team_reduce(const Team& team, int64_t n, const G& g) {
  using Acc = typename Op::Acc;
  if constexpr (kHostExec) {
    return team_spans<Op>(
        team, n, [&](int64_t lo, int64_t len) { return lane_reduce<Op>(team, len, [&](Acc x, int64_t j) { return g(x, lo + j); }); });
  } else {
    Acc total = Op::init();
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, n), [&](int64_t j, Acc& a) { a = g(a, j); }, FunctorReducer<Op>(total));
    return total;
  }
}

#if defined(TESSERA_KOKKOS_HOST_LANE_MAX)
/**
 * NaN-sticky maximum of x[0, n) on one host thread: the CPU backend's lane_max (GCC vector
 * types; it skips NaN) and an OR of x != x. GCC keeps MaxReducer's NaN-aware select scalar (a
 * compare and a branch per element: amax ran at a fifth of the CPU backend's speed).
 */
inline float host_max(const float* x, int64_t n) {
  int nan = 0;
  for (int64_t j = 0; j < n; ++j) nan |= x[j] != x[j];
  return nan ? __builtin_nanf("") : cpu::lane_max(n, x);
}
#endif

/** Op-reduction of x[0, n) across the team (team_reduce over Op::step), with host_max for float maxima. */
template <class Op, class T>
KOKKOS_INLINE_FUNCTION typename Op::Acc team_reduce_span(const Team& team, const T* x, int64_t n) {
  using Acc = typename Op::Acc;
#if defined(TESSERA_KOKKOS_HOST_LANE_MAX)
  if constexpr (std::is_same_v<Op, kernels::MaxReducer<float>>) {
    return team_spans<Op>(team, n, [&](int64_t lo, int64_t len) { return host_max(x + lo, len); });
  }
#endif
  return team_reduce<Op>(team, n, [&](Acc a, int64_t j) { return Op::step(a, x[j]); });
}

/** A double sum as a reducer for team_reduce. */
struct DoubleSum {
  using Acc = double;
  static KOKKOS_INLINE_FUNCTION double init() { return 0; }
  static KOKKOS_INLINE_FUNCTION double merge(double a, double b) { return a + b; }
};

/** Sum of f(i) for i in [0, n) across the team; every team member gets the result. */
template <class F> KOKKOS_INLINE_FUNCTION double team_sum(const Team& team, int64_t n, const F& f) {
  return team_reduce<DoubleSum>(team, n, [&](double a, int64_t i) { return a + f(i); });
}

/** Loads element i of p as double through the type's compute type. */
template <class T> KOKKOS_INLINE_FUNCTION double ld(const T* p, int64_t i) { return static_cast<double>(static_cast<compute_t<T>>(p[i])); }

// Kernel families (one file each); register.cpp installs them all.
void register_elementwise(KernelTable& table);  // calls the two below
void register_elementwise_unary(KernelTable& table);
void register_elementwise_binary(KernelTable& table);
void register_reductions(KernelTable& table);
void register_linalg(KernelTable& table);
void register_nn(KernelTable& table);
void register_attention(KernelTable& table);

}  // namespace tessera::kokkos
