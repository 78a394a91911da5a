// Generic elementwise kernels: every unary/binary functor in core/kernels becomes a CPU
// kernel here through the op list (exp, log, tanh, erf and the activations through their
// vectorisable float versions in vec_math.h), with a contiguous fast path (vectorised by the compiler
// for the ISA this file is built for) and a strided path for views and broadcasts.
#include <algorithm>

#include "../common/dtype_dispatch.h"
#include "../common/strided_loop.h"
#include "cpu_backend.h"
#include "vec_math.h"
#include "tessera/kernels/activation.h"
#include "tessera/kernels/binary.h"
#include "tessera/kernels/unary.h"

TESSERA_CPU_KERNELS_BEGIN
namespace {
using backend_common::for_range;
using backend_common::make_plan;
using backend_common::StridedPlan;

template <int N, class Body> void run_plan(const StridedPlan<N>& plan, Body body) {
  parallel_for(plan.numel, kParallelGrain, [&](int64_t b, int64_t e) { for_range(plan, b, e, body); });
}

template <class Fn, class T> void unary_loop(const Tensor& x, Tensor& out) {
  using C = compute_t<T>;
  const auto plan = make_plan<2>(out.shape(), {&out, &x});
  run_plan(plan, [](char* const* p, const int64_t* s, int64_t n) {
    const Fn fn{};
    T* o = reinterpret_cast<T*>(p[0]);
    const T* a = reinterpret_cast<const T*>(p[1]);
    if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(fn(static_cast<C>(a[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) {
        *reinterpret_cast<T*>(p[0] + i * s[0]) =
            static_cast<T>(fn(static_cast<C>(*reinterpret_cast<const T*>(p[1] + i * s[1]))));
      }
    }
  });
}

template <class Fn, DTypePolicy P> void unary_kernel(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  Tensor& out = c.outputs[0];
  const char* name = op_name(c.op).data();
  if constexpr (P == DTypePolicy::Float) {
    backend_common::dispatch_float(x.dtype(), name, [&]<class T>() { unary_loop<Fn, T>(x, out); });
  } else {
    backend_common::dispatch_numeric(x.dtype(), name, [&]<class T>() { unary_loop<Fn, T>(x, out); });
  }
}

// O is the output element type (T, or bool for comparisons and logical ops).
template <class Fn, class T, class O> void binary_loop(const Tensor& a, const Tensor& b, Tensor& out) {
  using C = compute_t<T>;
  const auto plan = make_plan<3>(out.shape(), {&out, &a, &b});
  run_plan(plan, [](char* const* p, const int64_t* s, int64_t n) {
    const Fn fn{};
    O* o = reinterpret_cast<O*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    const T* y = reinterpret_cast<const T*>(p[2]);
    constexpr int64_t t = sizeof(T), so = sizeof(O);
    if (s[0] == so && s[1] == t && s[2] == t) {
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(fn(static_cast<C>(x[i]), static_cast<C>(y[i])));
    } else if (s[0] == so && s[1] == t && s[2] == 0) {  // tensor op broadcast scalar
      const C yv = static_cast<C>(*y);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(fn(static_cast<C>(x[i]), yv));
    } else if (s[0] == so && s[1] == 0 && s[2] == t) {
      const C xv = static_cast<C>(*x);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(fn(xv, static_cast<C>(y[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const C xv = static_cast<C>(*reinterpret_cast<const T*>(p[1] + i * s[1]));
        const C yv = static_cast<C>(*reinterpret_cast<const T*>(p[2] + i * s[2]));
        *reinterpret_cast<O*>(p[0] + i * s[0]) = static_cast<O>(fn(xv, yv));
      }
    }
  });
}

template <class Fn, DTypePolicy P> void binary_kernel(const KernelCall& c) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  Tensor& out = c.outputs[0];
  const char* name = op_name(c.op).data();
  if constexpr (P == DTypePolicy::Arith) {
    backend_common::dispatch_numeric(a.dtype(), name, [&]<class T>() { binary_loop<Fn, T, T>(a, b, out); });
  } else if constexpr (P == DTypePolicy::TrueDiv) {
    backend_common::dispatch_float(a.dtype(), name, [&]<class T>() { binary_loop<Fn, T, T>(a, b, out); });
  } else if constexpr (P == DTypePolicy::Compare) {
    backend_common::dispatch_all(a.dtype(), name, [&]<class T>() { binary_loop<Fn, T, bool>(a, b, out); });
  } else if constexpr (P == DTypePolicy::Bitwise) {
    backend_common::dispatch_integral(a.dtype(), name, [&]<class T>() { binary_loop<Fn, T, T>(a, b, out); });
  } else {
    binary_loop<Fn, bool, bool>(a, b, out);
  }
}

void where_kernel(const KernelCall& c) {
  Tensor& out = c.outputs[0];
  backend_common::dispatch_all(out.dtype(), "where", [&]<class T>() {
    const auto plan = make_plan<4>(out.shape(), {&out, &c.inputs[0], &c.inputs[1], &c.inputs[2]});
    run_plan(plan, [](char* const* p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const bool cond = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
        *reinterpret_cast<T*>(p[0] + i * s[0]) = *reinterpret_cast<const T*>(p[cond ? 2 : 3] + i * s[cond ? 2 : 3]);
      }
    });
  });
}
// [b, e) of a row-major [rows, n] array as row pieces: body(first element, first column, length).
template <class Body> void for_row_pieces(int64_t b, int64_t e, int64_t n, Body body) {
  while (b < e) {
    const int64_t col = b % n, len = std::min(n - col, e - b);
    body(b, col, len);
    b += len;
  }
}

// The activation's vectorisable functor, known at compile time so each loop vectorises.
struct IdentityFn {
  template <class T> T operator()(T x) const { return x; }
};
template <Activation A> struct ActFn { using type = IdentityFn; };
template <> struct ActFn<Activation::relu> { using type = kernels::ReluFn; };
template <> struct ActFn<Activation::gelu> { using type = vmath::GeluFn; };
template <> struct ActFn<Activation::gelu_tanh> { using type = vmath::GeluTanhFn; };
template <> struct ActFn<Activation::silu> { using type = vmath::SiluFn; };
template <> struct ActFn<Activation::sigmoid> { using type = vmath::SigmoidFn; };
template <> struct ActFn<Activation::tanh> { using type = vmath::TanhFn; };

// y = act(x + bias) in one pass: a linear layer's epilogue as its own op.
void bias_activation_kernel(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  const int64_t n = x.size(-1);
  backend_common::dispatch_float(x.dtype(), "bias_activation", [&]<class T>() {
    using C = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* bp = static_cast<const T*>(c.inputs[1].data_ptr());
    T* out = static_cast<T*>(c.outputs[0].data_ptr());
    backend_common::dispatch_activation(c.attrs.activation, [&]<Activation A>() {
      parallel_for(x.numel(), kParallelGrain, [&](int64_t b, int64_t e) {
        for_row_pieces(b, e, n, [&](int64_t i0, int64_t col, int64_t len) {
          const typename ActFn<A>::type fn{};
          const T* xr = xp + i0;
          const T* br = bp + col;
          T* o = out + i0;
          for (int64_t j = 0; j < len; ++j) o[j] = static_cast<T>(fn(static_cast<C>(xr[j]) + static_cast<C>(br[j])));
        });
      });
    });
  });
}

// g * act'(z) of one activation known at compile time, so each loop vectorises.
template <Activation A> struct ActivationGradFn {
  template <class T> T operator()(T g, T saved) const { return kernels::activation_grad(A, g, saved); }
};
template <class Grad, class T> void activation_backward_loop(const KernelCall& c) {
  using C = compute_t<T>;
  const T* g = static_cast<const T*>(c.inputs[0].data_ptr());
  const T* v = static_cast<const T*>(c.inputs[1].data_ptr());
  T* out = static_cast<T*>(c.outputs[0].data_ptr());
  if (c.inputs.size() > 2 && c.inputs[2].defined()) {  // z = saved + bias (bias_activation)
    const T* bias = static_cast<const T*>(c.inputs[2].data_ptr());
    const int64_t n = c.inputs[1].size(-1);
    parallel_for(c.outputs[0].numel(), kParallelGrain, [&](int64_t b, int64_t e) {
      for_row_pieces(b, e, n, [&](int64_t i0, int64_t col, int64_t len) {
        for (int64_t j = 0; j < len; ++j) {
          const int64_t i = i0 + j;
          out[i] = static_cast<T>(Grad{}(static_cast<C>(g[i]), static_cast<C>(v[i]) + static_cast<C>(bias[col + j])));
        }
      });
    });
    return;
  }
  parallel_for(c.outputs[0].numel(), kParallelGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = static_cast<T>(Grad{}(static_cast<C>(g[i]), static_cast<C>(v[i])));
  });
}
// The backward of an activation (and of a fused linear + activation): from the output y for
// relu/sigmoid/tanh, from the pre-activation z for gelu/gelu_tanh/silu (kernels/activation.h).
void activation_backward_kernel(const KernelCall& c) {
  backend_common::dispatch_float(c.outputs[0].dtype(), "activation_backward", [&]<class T>() {
    switch (c.attrs.activation) {
      case Activation::relu: return activation_backward_loop<ActivationGradFn<Activation::relu>, T>(c);
      case Activation::sigmoid: return activation_backward_loop<ActivationGradFn<Activation::sigmoid>, T>(c);
      case Activation::tanh: return activation_backward_loop<ActivationGradFn<Activation::tanh>, T>(c);
      case Activation::gelu: return activation_backward_loop<vmath::GeluGradFn, T>(c);
      case Activation::gelu_tanh: return activation_backward_loop<vmath::GeluTanhGradFn, T>(c);
      case Activation::silu: return activation_backward_loop<vmath::SiluGradFn, T>(c);
      case Activation::none: return activation_backward_loop<ActivationGradFn<Activation::none>, T>(c);
    }
  });
}
}  // namespace

void register_elementwise(KernelTable& table) {
  table[OpId::ActivationBackward] = &activation_backward_kernel;
  table[OpId::BiasActivation] = &bias_activation_kernel;
#define TESSERA_UNARY_OP(id, name, fn, policy) table[OpId::id] = &unary_kernel<vmath::fast_t<kernels::fn>, DTypePolicy::policy>;
#define TESSERA_BINARY_OP(id, name, fn, policy) table[OpId::id] = &binary_kernel<kernels::fn, DTypePolicy::policy>;
#include "tessera/ops/op_list.inc"
  table[OpId::Where] = &where_kernel;
}

TESSERA_CPU_KERNELS_END
