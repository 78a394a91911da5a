#pragma once
// Rows held in a warp's registers: lane l holds the 16-byte packs l, l + warp, ... of a row of up
// to 32 x kPack<T> x P elements (a 64-lane wavefront has room for twice the row). The row kernels
// that keep their row this way (softmax, layer norm) read it once, reduce by shuffles with no
// block barrier, and write it once; a block per row spent most of its time in barriers (0.55x
// PyTorch's softmax and 0.72x its layer norm at 16384 x 1024 on an H200).
#include <initializer_list>
#include <type_traits>

#include "common.h"

namespace tessera::gpu {
inline namespace TESSERA_GPU_TARGET {

/** Packs per lane for rows of `len` elements of T (for a 32-lane warp): 1, 2, 4 or 8, at most 32
 *  elements a lane (three such rows stay in registers without spilling); 0 past that (the
 *  caller's block-per-row kernel). */
template <class T>
int warp_row_packs(int64_t len) {
  const int64_t per = int64_t{32} * kPack<T>;
  for (int p = 1; p <= 8 && p * kPack<T> <= 32; p *= 2) {
    if (len <= p * per) return p;
  }
  return 0;
}

/** Whether rows of `len` elements at these addresses move as whole 16-byte packs: the register
 *  path's condition (each pack is then wholly inside the row or wholly past it, so a lane tests
 *  one bound per pack, not per element: per-element tests in the unrolled loops cost hipcc 70-80
 *  spilled SGPRs on gfx90a). Other rows take the block-per-row kernels. */
template <class T>
bool warp_rows_vectorised(int64_t len, std::initializer_list<const void*> rows) {
  if (len % kPack<T> != 0) return false;
  for (const void* p : rows) {
    if (p && !pack_aligned(p, sizeof(T) * kPack<T>)) return false;
  }
  return true;
}

/** This lane's packs of row[0, len) in the compute type C; `fill` in the packs past the end. */
template <class T, int P, class C>
TESSERA_DEVICE void load_warp_row(const T* row, int64_t len, C fill, C (&v)[P][kPack<T>]) {
  constexpr int N = kPack<T>;
  const int64_t lane = gpu::lane(), width = warp_size();
  TESSERA_UNROLL
  for (int p = 0; p < P; ++p) {
    const int64_t e = (lane + p * width) * N;
    Pack<T, N> x{};
    if (e < len) x = reinterpret_cast<const Pack<T, N>*>(row)[e / N];
    TESSERA_UNROLL
    for (int j = 0; j < N; ++j) v[p][j] = e < len ? static_cast<C>(x.v[j]) : fill;
  }
}

/** Whether this lane's pack p is inside a row of `len`. */
template <class T>
TESSERA_DEVICE bool in_warp_row(int p, int64_t len) {
  return (static_cast<int64_t>(gpu::lane()) + p * static_cast<int64_t>(warp_size())) * kPack<T> < len;
}

/** One 16-byte store of a pack: what nvcc and hipcc emit for the aligned Pack. The emulator's host
 *  compiler splits the same copy into element stores after a branch, which its access counters
 *  (like a profiler) would rightly count as a quarter-coalesced store; a vector-typed store keeps
 *  it one access there too. */
template <class T, int N>
TESSERA_DEVICE void store_pack(Pack<T, N>* dst, const Pack<T, N>& y) {
#if defined(__CUDACC__) || defined(__HIPCC__)
  *dst = y;
#else
  static_assert(sizeof(Pack<T, N>) == 16, "a pack is 16 bytes");
  typedef char Bytes __attribute__((vector_size(16)));  // not an alias template: GCC drops the attribute there
  Bytes b;
  __builtin_memcpy(&b, &y, sizeof b);
  *reinterpret_cast<Bytes*>(dst) = b;
#endif
}

/** Writes this lane's packs (converted to T) to row[0, len). */
template <class T, int P, class C>
TESSERA_DEVICE void store_warp_row(T* row, int64_t len, const C (&v)[P][kPack<T>]) {
  constexpr int N = kPack<T>;
  const int64_t lane = gpu::lane(), width = warp_size();
  TESSERA_UNROLL
  for (int p = 0; p < P; ++p) {
    const int64_t e = (lane + p * width) * N;
    Pack<T, N> y;
    TESSERA_UNROLL
    for (int j = 0; j < N; ++j) y.v[j] = static_cast<T>(v[p][j]);
    if (e < len) store_pack(reinterpret_cast<Pack<T, N>*>(row) + e / N, y);
  }
}

/** 1 / s correctly rounded, as the division gives, without the call to the division's slow path
 *  that nvcc emits for f32 (with a row's 32 values live across it, ptxas spilled around it). */
template <class C>
TESSERA_DEVICE C reciprocal_rn(C s) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<C, float>) return __frcp_rn(s);
#endif
  return C(1) / s;
}

/** Calls fn(std::integral_constant<int, P>) for the row length's packs per lane (1, 2, 4 or 8),
 *  to launch the kernel instantiated for P; false when the rows are too long for registers or
 *  not `vectorised` (warp_rows_vectorised), or need more than `max_packs`. */
template <class T, class Fn>
bool with_warp_row_packs(int64_t len, bool vectorised, Fn&& fn, int max_packs = 8) {
  const int packs = vectorised && warp_row_packs<T>(len) <= max_packs ? warp_row_packs<T>(len) : 0;
  const auto call = [&]<int P>() {  // only the P that warp_row_packs can return are instantiated
    if constexpr (P * kPack<T> <= 32) {
      if (packs == P) {
        fn(std::integral_constant<int, P>{});
        return true;
      }
    }
    return false;
  };
  return call.template operator()<1>() || call.template operator()<2>() || call.template operator()<4>() || call.template operator()<8>();
}

}  // namespace TESSERA_GPU_TARGET
}  // namespace tessera::gpu
