// Philox-based random kernels. Element i of a draw uses word i % 4 of the Philox block i / 4
// (see core/kernels/philox.h), so results do not depend on how the work is split.
#include <cmath>

#include "../common/dtype_dispatch.h"
#include "cpu_backend.h"
#include "philox_simd.h"
#include "tessera/kernels/convert.h"
#include "tessera/kernels/philox.h"
#include "tessera/kernels/random_draw.h"

TESSERA_CPU_KERNELS_BEGIN
namespace {

// Runs f(words, first_element, count) over the output in runs of up to 32 elements starting
// at a multiple of 4; words[j] is element first + j's Philox word (philox_simd.h: 8 blocks
// per call, the scalar reference for the last partial run).
template <class F> void for_words(const Tensor& out, const OpAttrs& a, F&& f) {
  using philox_simd::kBlocks;
  const int64_t n = out.numel();
  const int64_t groups = (n + philox_simd::kWords - 1) / philox_simd::kWords;
  parallel_for(groups, kParallelGrain / philox_simd::kWords, [&](int64_t g0, int64_t g1) {
    alignas(32) uint32_t words[philox_simd::kWords];
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t first = g * philox_simd::kWords;
      const int64_t count = std::min<int64_t>(philox_simd::kWords, n - first);
      if (count == philox_simd::kWords) {
        philox_simd::philox_blocks8(a.seed, a.offset, static_cast<uint64_t>(g * kBlocks), words);
      } else {
        for (int64_t b = 0; b * 4 < count; ++b) {
          const kernels::Philox4 w = kernels::philox_block(a.seed, a.offset, static_cast<uint64_t>(g * kBlocks + b));
          for (int j = 0; j < 4; ++j) words[4 * b + j] = w.v[j];
        }
      }
      f(static_cast<const uint32_t*>(words), first, count);
    }
  });
}

void uniform_kernel(const KernelCall& c) {
  Tensor& out = c.outputs[0];
  const double lo = c.attrs.random.low, hi = c.attrs.random.high, span = hi - lo;
  backend_common::dispatch_float(out.dtype(), "rand", [&]<class T>() {
    T* o = static_cast<T*>(out.data_ptr());
    for_words(out, c.attrs, [&](const uint32_t* w, int64_t first, int64_t count) {
      for (int64_t j = 0; j < count; ++j) {
        using C = compute_t<T>;
        const C u = static_cast<C>(kernels::uniform_from_bits(w[j]));
        C v = static_cast<C>(lo) + static_cast<C>(span) * u;
        if (v >= static_cast<C>(hi) && span > 0) v = static_cast<C>(lo);  // rounding could reach high
        o[first + j] = static_cast<T>(v);
      }
    });
  });
}

void normal_kernel(const KernelCall& c) {
  Tensor& out = c.outputs[0];
  const float mean = static_cast<float>(c.attrs.random.mean), stddev = static_cast<float>(c.attrs.random.stddev);
  backend_common::dispatch_float(out.dtype(), "randn", [&]<class T>() {
    T* o = static_cast<T*>(out.data_ptr());
    for_words(out, c.attrs, [&](const uint32_t* w, int64_t first, int64_t count) {
      // Box-Muller on word pairs (0,1) and (2,3) of each block: a cos and a sin sample per pair.
      for (int64_t j = 0; j < count; ++j) {
        const int64_t pair = j & ~int64_t{1};
        const float u1 = 1.0f - kernels::uniform_from_bits(w[pair]);  // (0, 1]: log is finite
        const float u2 = kernels::uniform_from_bits(w[pair + 1]);
        const float r = std::sqrt(-2.0f * std::log(u1));
        const float angle = 6.283185307179586f * u2;
        const float z = (j & 1) ? r * std::sin(angle) : r * std::cos(angle);
        o[first + j] = static_cast<T>(mean + stddev * z);
      }
    });
  });
}

void randint_kernel(const KernelCall& c) {
  Tensor& out = c.outputs[0];
  const auto lo = static_cast<int64_t>(c.attrs.random.low);
  const auto range = static_cast<uint64_t>(static_cast<int64_t>(c.attrs.random.high) - lo);
  backend_common::dispatch_numeric(out.dtype(), "randint", [&]<class T>() {
    T* o = static_cast<T*>(out.data_ptr());
    for_words(out, c.attrs, [&](const uint32_t* w, int64_t first, int64_t count) {
      for (int64_t j = 0; j < count; ++j) {
        // 64 bits (this word and the next of its block) keep the modulo bias below range / 2^64.
        const uint64_t bits = (static_cast<uint64_t>(w[j]) << 32) | w[(j & ~int64_t{3}) | ((j + 1) & 3)];
        const int64_t v = lo + static_cast<int64_t>(bits % range);
        o[first + j] = kernels::convert<T, int64_t>(v);
      }
    });
  });
}

// y = residual + mask * x * scale over contiguous tensors (the front end makes them so).
void dropout_add_kernel(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& residual = c.inputs[1];
  Tensor& out = c.outputs[0];
  const float keep = static_cast<float>(1.0 - c.attrs.dropout_p);
  const double scale = 1.0 / (1.0 - c.attrs.dropout_p);
  backend_common::dispatch_float(out.dtype(), "dropout_add", [&]<class T>() {
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* rp = residual.defined() ? static_cast<const T*>(residual.data_ptr()) : nullptr;
    T* o = static_cast<T*>(out.data_ptr());
    using C = compute_t<T>;
    const C scale_c = static_cast<C>(scale);
    // kernels::dropout_add_block's rule, 32 elements per Philox batch.
    for_words(out, c.attrs, [xp, rp, o, keep, scale_c](const uint32_t* w, int64_t first, int64_t count) {
      const T* x = xp + first;
      T* y = o + first;
      if (rp) {
        const T* r = rp + first;
        for (int64_t j = 0; j < count; ++j) {
          const C kept = kernels::dropout_kept(w[j], keep, static_cast<C>(x[j]), scale_c);
          y[j] = static_cast<T>(static_cast<C>(r[j]) + kept);
        }
      } else {
        for (int64_t j = 0; j < count; ++j) {
          y[j] = static_cast<T>(kernels::dropout_kept(w[j], keep, static_cast<C>(x[j]), scale_c));
        }
      }
    });
  });
}

void bernoulli_kernel(const KernelCall& c) {
  Tensor& out = c.outputs[0];
  const float p = static_cast<float>(c.attrs.random.p);
  backend_common::dispatch_all(out.dtype(), "bernoulli", [&]<class T>() {
    T* o = static_cast<T*>(out.data_ptr());
    for_words(out, c.attrs, [&](const uint32_t* w, int64_t first, int64_t count) {
      for (int64_t j = 0; j < count; ++j) {
        o[first + j] = kernels::convert<T, int>(kernels::uniform_from_bits(w[j]) < p ? 1 : 0);
      }
    });
  });
}
}  // namespace

void register_random(KernelTable& table) {
  table[OpId::RandUniform] = &uniform_kernel;
  table[OpId::RandNormal] = &normal_kernel;
  table[OpId::RandInt] = &randint_kernel;
  table[OpId::Bernoulli] = &bernoulli_kernel;
  table[OpId::DropoutAdd] = &dropout_add_kernel;
}

TESSERA_CPU_KERNELS_END
