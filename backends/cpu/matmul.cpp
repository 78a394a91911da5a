// matmul (batched, broadcast batch axes) and linear (fused bias + activation) kernels.
// f32/f16/bf16 go through the packed sgemm; f64 and integers through a simple blocked loop
// accumulating in double / wrapping uint64.
#include <vector>

#include "../common/dtype_dispatch.h"
#include "cpu_backend.h"
#include "gemm.h"
#include "tessera/kernels/convert.h"

TESSERA_CPU_KERNELS_BEGIN
namespace {

bool sgemm_dtype(DType dt) { return dt == DType::f32 || dt == DType::f16 || dt == DType::bf16; }

// Batch offsets (elements) of the three operands for every batch index, row-major.
struct BatchOffsets {
  std::vector<int64_t> a, b, c;
};
BatchOffsets batch_offsets(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t nb = out.dim() - 2;
  Shape batch(out.shape().begin(), out.shape().begin() + nb);
  const int64_t count = numel(batch);
  BatchOffsets off;
  off.a.resize(count), off.b.resize(count), off.c.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    int64_t rem = i, oa = 0, ob = 0, oc = 0;
    for (int64_t d = nb - 1; d >= 0; --d) {
      const int64_t coord = rem % batch[d];
      rem /= batch[d];
      oa += coord * a.strides()[d];
      ob += coord * b.strides()[d];
      oc += coord * out.strides()[d];
    }
    off.a[i] = oa, off.b[i] = ob, off.c[i] = oc;
  }
  return off;
}

template <class T>
void generic_gemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t ars, int64_t acs, const T* b, int64_t brs,
                  int64_t bcs, T* c, int64_t ldc, const T* bias, int64_t bias_stride, Activation act, bool parallel) {
  using Acc = std::conditional_t<kernels::is_float_like_v<T>, double, uint64_t>;
  parallel_for(m, parallel ? std::max<int64_t>(1, 4096 / std::max<int64_t>(n * k, 1)) : m + 1, [&](int64_t r0, int64_t r1) {
    std::vector<Acc> acc(static_cast<size_t>(n));
    for (int64_t i = r0; i < r1; ++i) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t p = 0; p < k; ++p) {
        const Acc av = static_cast<Acc>(a[i * ars + p * acs]);
        const T* brow = b + p * brs;
        for (int64_t j = 0; j < n; ++j) acc[j] += av * static_cast<Acc>(brow[j * bcs]);
      }
      for (int64_t j = 0; j < n; ++j) {
        if constexpr (kernels::is_float_like_v<T>) {
          double v = acc[j] + (bias ? static_cast<double>(bias[j * bias_stride]) : 0.0);
          c[i * ldc + j] = static_cast<T>(kernels::apply_activation(act, v));
        } else {
          c[i * ldc + j] = static_cast<T>(static_cast<int64_t>(acc[j]));
        }
      }
    }
  });
}

// One GEMM on float-family operands, writing `out_dtype` at c (row stride ldc).
void float_gemm(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b, void* c, DType out_dtype,
                int64_t ldc, const GemmEpilogue& e, bool parallel) {
  if (out_dtype == DType::f32) {
    sgemm(m, n, k, a, b, static_cast<float*>(c), ldc, e, parallel);
    return;
  }
  if (out_dtype == DType::bf16 && !e.bias && e.activation == Activation::none &&
      sgemm_bf16(m, n, k, a, b, nullptr, 0, parallel, static_cast<BFloat16*>(c), ldc)) {
    return;  // rounded in the AVX512_BF16 kernel's registers
  }
  // f32 result, rounded once into the 16-bit output (rows in parallel); the scratch is reused
  // across calls so steady-state GEMMs do not fault in fresh pages.
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(m * n));
  float* tmp = scratch.data();
  sgemm(m, n, k, a, b, tmp, n, e, parallel);
  parallel_for(m, parallel ? std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)) : m + 1, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const float* src = tmp + i * n;
      if (out_dtype == DType::f16) {
        Half* dst = static_cast<Half*>(c) + i * ldc;
        for (int64_t j = 0; j < n; ++j) dst[j] = Half(src[j]);
      } else {
        BFloat16* dst = static_cast<BFloat16*>(c) + i * ldc;
        for (int64_t j = 0; j < n; ++j) dst[j] = BFloat16(src[j]);
      }
    }
  });
}

void matmul_kernel(const KernelCall& call) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  Tensor& out = call.outputs[0];
  const int64_t r = out.dim();
  const int64_t m = out.shape()[r - 2], n = out.shape()[r - 1], k = a.shape()[r - 1];
  const int64_t ars = a.strides()[r - 2], acs = a.strides()[r - 1], brs = b.strides()[r - 2], bcs = b.strides()[r - 1];
  const BatchOffsets off = batch_offsets(a, b, out);
  const int64_t batches = static_cast<int64_t>(off.c.size());
  // Small matrices in a batch: parallel over the batch, each GEMM on one thread.
  const bool per_batch = batches > 1 && m * n * k < (int64_t{1} << 18);
  const DType dt = a.dtype();
  const size_t item = a.itemsize();
  auto one = [&](int64_t i, bool parallel) {
    const char* pa = static_cast<const char*>(a.data_ptr()) + off.a[i] * static_cast<int64_t>(item);
    const char* pb = static_cast<const char*>(b.data_ptr()) + off.b[i] * static_cast<int64_t>(item);
    char* pc = static_cast<char*>(out.data_ptr()) + off.c[i] * static_cast<int64_t>(item);
    if (sgemm_dtype(dt)) {
      float_gemm(m, n, k, {pa, dt, ars, acs}, {pb, dt, brs, bcs}, pc, dt, n, {}, parallel);
    } else {
      backend_common::dispatch_numeric(dt, "matmul", [&]<class T>() {
        generic_gemm<T>(m, n, k, reinterpret_cast<const T*>(pa), ars, acs, reinterpret_cast<const T*>(pb), brs, bcs,
                        reinterpret_cast<T*>(pc), n, nullptr, 0, Activation::none, parallel);
      });
    }
  };
  if (per_batch) {
    parallel_for(batches, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) one(i, false);
    });
  } else {
    for (int64_t i = 0; i < batches; ++i) one(i, true);
  }
}

void linear_kernel(const KernelCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const Tensor& bias = call.inputs[2];
  Tensor& out = call.outputs[0];
  const int64_t m = x.shape()[0], k = x.shape()[1], n = w.shape()[0];
  const DType dt = x.dtype();
  if (sgemm_dtype(dt)) {
    GemmEpilogue e;
    e.activation = call.attrs.activation;
    Tensor bias_c;
    if (bias.defined()) {
      bias_c = bias.contiguous();
      e.bias = bias_c.data_ptr();
      e.bias_dtype = bias_c.dtype();
    }
    // B = w^T: walking k moves along w's columns, walking n along its rows.
    float_gemm(m, n, k, {x.data_ptr(), dt, x.strides()[0], x.strides()[1]},
               {w.data_ptr(), dt, w.strides()[1], w.strides()[0]}, out.data_ptr(), dt, n, e, true);
    return;
  }
  backend_common::dispatch_float(dt, "linear", [&]<class T>() {
    generic_gemm<T>(m, n, k, static_cast<const T*>(x.data_ptr()), x.strides()[0], x.strides()[1],
                    static_cast<const T*>(w.data_ptr()), w.strides()[1], w.strides()[0], static_cast<T*>(out.data_ptr()),
                    n, bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr,
                    bias.defined() ? bias.strides()[0] : 0, call.attrs.activation, true);
  });
}
}  // namespace

void register_linalg(KernelTable& table) {
  table[OpId::Matmul] = &matmul_kernel;
  table[OpId::Linear] = &linear_kernel;
}

TESSERA_CPU_KERNELS_END
