#pragma once
// Helpers shared by the Kokkos kernel files. Kernels run on Kokkos::DefaultExecutionSpace and
// read tensor memory through raw pointers in its memory space. Flat loops use RangePolicy;
// row-wise kernels use one team per row with TeamThreadRange loops and team reductions, so
// they are correct for any team size (1 on Serial, hundreds of threads on CUDA/HIP).
#include <Kokkos_Core.hpp>
#include <cstdlib>

#include "../common/dtype_dispatch.h"
#include "../common/indexer.h"
#include "tessera/backend/kernel.h"
#include "tessera/kernels/half.h"
#include "tessera/tensor.h"

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

/** parallel_for over [0, n); the label names the op in Kokkos tools/profilers. */
template <class F> void for_n(const char* label, int64_t n, const F& f) {
  if (n <= 0) return;
  Kokkos::parallel_for(label, Kokkos::RangePolicy<Exec, Kokkos::IndexType<int64_t>>(0, n), f);
}

/**
 * Team size: Kokkos's choice (AUTO), or TESSERA_KOKKOS_TEAM_SIZE when set: host execution
 * spaces usually pick 1, which hides team-level races and scratch bugs, so the tests force 2+.
 */
inline int forced_team_size() {
  static const int n = [] {
    const char* e = std::getenv("TESSERA_KOKKOS_TEAM_SIZE");
    return e ? std::atoi(e) : 0;
  }();
  return n;
}
/** A league of `league` teams, with `vector` lanes per thread and the team size above. */
inline TeamPolicy team_policy(int64_t league, int vector = 1) {
  const int forced = forced_team_size();
  return forced > 0 ? TeamPolicy(league, forced, vector) : TeamPolicy(league, Kokkos::AUTO, vector);
}

/** Host execution spaces (Serial, OpenMP, Threads): their vector lanes are the compiler's. */
inline constexpr bool kHostExec = Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible;

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

/** f(i) for i in [0, n) on the team's threads and vector lanes: spans of 256 on TeamThreadRange, each a vector_for. */
template <class F>
KOKKOS_INLINE_FUNCTION void team_vector_for(const Team& team, int64_t n, const F& f) {
  constexpr int64_t kSpan = 256;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, (n + kSpan - 1) / kSpan), [&](int64_t s) {
    const int64_t lo = s * kSpan, len = n - lo < kSpan ? n - lo : kSpan;
    vector_for(team, len, [&](int64_t j) { f(lo + j); });
  });
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
 * f(run, i, j) over `runs` planes of rows x cols: one team per plane, its rows on team threads
 * and each row's columns on vector lanes (TeamThreadRange / ThreadVectorRange), so a plane's
 * index arithmetic is done once and a row is a plain loop (host: one thread walks the plane and
 * the row loop vectorises; GPU: the team's threads and lanes split it).
 */
template <class F>
void for_each_plane(const char* label, int64_t runs, int64_t rows, int64_t cols, const F& f) {
  if (runs <= 0 || rows <= 0 || cols <= 0) return;
  const int vector = std::min(8, TeamPolicy::vector_length_max());
  Kokkos::parallel_for(
      label, team_policy(runs, vector), KOKKOS_LAMBDA(const Team& team) {
        const int64_t run = team.league_rank();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows),
                             [&](int64_t i) { vector_for(team, cols, [&](int64_t j) { f(run, i, j); }); });
      });
}

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

/** Sum of f(i) for i in [0, n) across the team; every team member gets the result. */
template <class F> KOKKOS_INLINE_FUNCTION double team_sum(const Team& team, int64_t n, const F& f) {
  double s = 0;
  Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, n), [&](int64_t i, double& acc) { acc += f(i); }, s);
  return s;
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
