// The ThreadSanitizer callbacks that the instrumented emulated kernel sources call
// (access_counters.h): loads and stores go to the access counters, atomics are performed for
// real (sequentially consistent, at least as strong as asked). No TSan runtime is linked; this
// file must itself be compiled without instrumentation. The set below covers what GCC and
// Clang emit for the kernel sources.
#include "access_counters.h"

// The types of the TSan atomic interface (compiler-rt's tsan_interface_atomic.h, not shipped by GCC).
using __tsan_atomic8 = char;
using __tsan_atomic16 = short;
using __tsan_atomic32 = int;
using __tsan_atomic64 = long;
using __tsan_memory_order = int;

namespace acc = tessera::emu::access;

#define TESSERA_PC __builtin_return_address(0)
#define TESSERA_RW(n)                                                                                           \
  void __tsan_read##n(void* a) { acc::record(a, n, false, TESSERA_PC); }                                        \
  void __tsan_write##n(void* a) { acc::record(a, n, true, TESSERA_PC); }                                        \
  void __tsan_unaligned_read##n(void* a) { acc::record(a, n, false, TESSERA_PC); }                              \
  void __tsan_unaligned_write##n(void* a) { acc::record(a, n, true, TESSERA_PC); }                              \
  void __tsan_volatile_read##n(void* a) { acc::record(a, n, false, TESSERA_PC); }                               \
  void __tsan_volatile_write##n(void* a) { acc::record(a, n, true, TESSERA_PC); }                               \
  void __tsan_read##n##_pc(void* a, void* pc) { acc::record(a, n, false, pc); }                                 \
  void __tsan_write##n##_pc(void* a, void* pc) { acc::record(a, n, true, pc); }

#define TESSERA_ATOMIC(bits, T)                                                                                  \
  T __tsan_atomic##bits##_load(const volatile T* a, __tsan_memory_order) {                                      \
    acc::record_atomic(const_cast<const T*>(a));                                                                \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                                \
  }                                                                                                             \
  void __tsan_atomic##bits##_store(volatile T* a, T v, __tsan_memory_order) {                                   \
    acc::record_atomic(const_cast<const T*>(a));                                                                \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                                   \
  }                                                                                                             \
  T __tsan_atomic##bits##_exchange(volatile T* a, T v, __tsan_memory_order) {                                   \
    acc::record_atomic(const_cast<const T*>(a));                                                                \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                         \
  }                                                                                                             \
  T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, __tsan_memory_order) {                                 \
    acc::record_atomic(const_cast<const T*>(a));                                                                \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                          \
  }                                                                                                             \
  T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, __tsan_memory_order) {                                 \
    acc::record_atomic(const_cast<const T*>(a));                                                                \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                                          \
  }                                                                                                             \
  T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, __tsan_memory_order) {                                 \
    acc::record_atomic(const_cast<const T*>(a));                                                                \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                                          \
  }                                                                                                             \
  T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, __tsan_memory_order) {                                  \
    acc::record_atomic(const_cast<const T*>(a));                                                                \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                                           \
  }                                                                                                             \
  T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, __tsan_memory_order) {                                 \
    acc::record_atomic(const_cast<const T*>(a));                                                                \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                                          \
  }                                                                                                             \
  T __tsan_atomic##bits##_fetch_nand(volatile T* a, T v, __tsan_memory_order) {                                \
    acc::record_atomic(const_cast<const T*>(a));                                                                \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                         \
  }                                                                                                             \
  int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* c, T v, __tsan_memory_order, __tsan_memory_order) { \
    acc::record_atomic(const_cast<const T*>(a));                                                                \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                     \
  }                                                                                                             \
  int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* c, T v, __tsan_memory_order, __tsan_memory_order) { \
    acc::record_atomic(const_cast<const T*>(a));                                                                \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                      \
  }                                                                                                             \
  T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T c, T v, __tsan_memory_order, __tsan_memory_order) { \
    acc::record_atomic(const_cast<const T*>(a));                                                                \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                           \
    return c;                                                                                                   \
  }

extern "C" {
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_ignore_thread_begin() {}
void __tsan_ignore_thread_end() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
void __tsan_read_range(void* a, unsigned long n) { acc::record(a, static_cast<unsigned>(n), false, TESSERA_PC); }
void __tsan_write_range(void* a, unsigned long n) { acc::record(a, static_cast<unsigned>(n), true, TESSERA_PC); }
TESSERA_RW(1)
TESSERA_RW(2)
TESSERA_RW(4)
TESSERA_RW(8)
TESSERA_RW(16)
TESSERA_ATOMIC(8, __tsan_atomic8)
TESSERA_ATOMIC(16, __tsan_atomic16)
TESSERA_ATOMIC(32, __tsan_atomic32)
TESSERA_ATOMIC(64, __tsan_atomic64)
void __tsan_atomic_thread_fence(__tsan_memory_order) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(__tsan_memory_order) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
}
