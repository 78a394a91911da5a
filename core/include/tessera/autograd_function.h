#pragma once
// Custom autograd functions, as libtorch's torch::autograd::Function:
//
//   struct ClampST : tessera::autograd::Function<ClampST> {   // clamp, straight-through gradient
//     static Tensor forward(tessera::autograd::FunctionCtx* ctx, const Tensor& x, double lo, double hi) {
//       ctx->saved_data["lo"] = lo;
//       return clamp(x, lo, hi);
//     }
//     static std::vector<Tensor> backward(tessera::autograd::FunctionCtx* ctx, const std::vector<Tensor>& grad) {
//       return {grad[0]};                       // one gradient per tensor argument of forward
//     }
//   };
//   Tensor y = ClampST::apply(x, -1.0, 1.0);
//
// forward runs without recording (its ops leave no graph); apply records one node whose
// gradient is backward's. backward is written with public ops, so it runs on every backend and
// can itself be differentiated. It returns one gradient per tensor argument of forward (or one
// per argument, libtorch's convention, with undefined tensors for the non-tensor ones); an
// undefined gradient means none.
//
// forward may also return std::vector<Tensor> (several outputs, like libtorch's variable_list):
// apply then returns them all, and backward gets one gradient per output (zeros for an output
// the loss did not use, as libtorch's materialised gradients). Floating outputs are
// differentiable and must share one dtype and device; integer and bool outputs (indices, masks)
// come back without history and their gradients are undefined. The differentiable outputs are
// recorded as slices of one packed tensor whose node runs backward once with all their
// gradients.
#include <any>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "tessera/autograd.h"
#include "tessera/error.h"
#include "tessera/ops/shape_ops.h"
#include "tessera/tensor.h"

namespace tessera::autograd {

/** What forward leaves for backward. */
class FunctionCtx {
 public:
  /** Keeps tensors for backward, without their history (a saved output must not keep its own
   *  node alive). */
  void save_for_backward(std::vector<Tensor> tensors) {
    saved_.clear();
    for (Tensor& t : tensors) saved_.push_back(t.defined() ? t.detach() : t);
  }
  const std::vector<Tensor>& get_saved_variables() const { return saved_; }
  /** needs_input_grad[i]: the i-th tensor argument of forward requires grad. */
  std::vector<bool> needs_input_grad;
  /** Values for backward that are not tensors (sizes, flags, scalars), like libtorch's. */
  std::map<std::string, std::any> saved_data;

 private:
  std::vector<Tensor> saved_;
};

/** Attaches a node named `name` to `output` whose gradients for `inputs` are `backward(grad)`
 *  (what Function::apply records; public for hand-built nodes). */
void attach_backward(const std::string& name, const std::vector<Tensor>& inputs, Tensor& output,
                     std::function<std::vector<Tensor>(const Tensor&)> backward);

template <class Derived>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args) {
    auto ctx = std::make_shared<FunctionCtx>();
    std::vector<Tensor> inputs;
    std::vector<bool> is_tensor;
    (collect(inputs, is_tensor, args), ...);
    bool any = false;
    for (const Tensor& t : inputs) {
      const bool needs = t.defined() && t.requires_grad();
      ctx->needs_input_grad.push_back(needs);
      any = any || needs;
    }
    using Result = decltype(Derived::forward(ctx.get(), std::forward<Args>(args)...));
    if constexpr (std::is_same_v<Result, std::vector<Tensor>>) {
      std::vector<Tensor> outs;
      {
        NoGradGuard no_grad;
        outs = Derived::forward(ctx.get(), std::forward<Args>(args)...);
      }
      return record_many(ctx, inputs, is_tensor, std::move(outs), any);
    } else {
      static_assert(std::is_same_v<Result, Tensor>, "forward must return Tensor or std::vector<Tensor>");
      Tensor out;
      {
        NoGradGuard no_grad;
        out = Derived::forward(ctx.get(), std::forward<Args>(args)...);
      }
      TESSERA_CHECK(out.defined(), function_name(), "forward returned an undefined tensor");
      out = out.detach();  // a fresh handle: forward may have returned one of its inputs
      if (!grad_enabled() || !any) return out;
      attach_backward(function_name(), inputs, out, [ctx, is_tensor, n = inputs.size()](const Tensor& g) {
        return input_grads(Derived::backward(ctx.get(), std::vector<Tensor>{g}), is_tensor, n);
      });
      return out;
    }
  }

 private:
  /** backward's gradients, one per tensor argument of forward (or per argument: the tensors' kept). */
  static std::vector<Tensor> input_grads(std::vector<Tensor> grads, const std::vector<bool>& is_tensor, size_t n) {
    if (grads.size() == is_tensor.size() && grads.size() != n) {
      std::vector<Tensor> picked;
      for (size_t i = 0; i < grads.size(); ++i) {
        if (is_tensor[i]) picked.push_back(grads[i]);
      }
      grads = std::move(picked);
    }
    TESSERA_CHECK(grads.size() == n, function_name(), "backward returned ", grads.size(), " gradients for ", n,
                  " tensor arguments of forward");
    return grads;
  }

  static std::vector<Tensor> record_many(const std::shared_ptr<FunctionCtx>& ctx, const std::vector<Tensor>& inputs,
                                         const std::vector<bool>& is_tensor, std::vector<Tensor> outs, bool any) {
    TESSERA_CHECK(!outs.empty(), function_name(), "forward returned no outputs");
    std::vector<size_t> diff;  // the differentiable (floating) outputs
    for (size_t i = 0; i < outs.size(); ++i) {
      TESSERA_CHECK(outs[i].defined(), function_name(), "forward returned an undefined tensor as output ", i);
      outs[i] = outs[i].detach();
      if (is_floating(outs[i].dtype())) diff.push_back(i);
    }
    if (!grad_enabled() || !any || diff.empty()) return outs;
    const Tensor& first = outs[diff[0]];
    std::vector<Tensor> flat;
    std::vector<Shape> shapes(outs.size());
    for (size_t i : diff) {
      TESSERA_CHECK(outs[i].dtype() == first.dtype() && outs[i].device() == first.device(), function_name(),
                    "differentiable outputs must share one dtype and device: output ", diff[0], " is ", dtype_name(first.dtype()), " on ",
                    first.device().str(), ", output ", i, " is ", dtype_name(outs[i].dtype()), " on ", outs[i].device().str());
      shapes[i] = outs[i].shape();
      flat.push_back(outs[i].reshape({outs[i].numel()}));
    }
    Tensor packed;
    {
      NoGradGuard no_grad;
      packed = flat.size() == 1 ? flat[0].contiguous().detach() : cat(flat, 0);
    }
    const size_t n_out = outs.size(), n_in = inputs.size();
    attach_backward(function_name(), inputs, packed, [ctx, is_tensor, n_in, n_out, diff, shapes](const Tensor& g) {
      std::vector<Tensor> grads(n_out);  // undefined for the integer outputs
      int64_t at = 0;
      for (size_t i : diff) {
        const int64_t count = tessera::numel(shapes[i]);
        grads[i] = g.narrow(0, at, count).reshape(shapes[i]);
        at += count;
      }
      return input_grads(Derived::backward(ctx.get(), grads), is_tensor, n_in);
    });
    int64_t at = 0;
    for (size_t i : diff) {  // each output a recorded slice of the packed tensor
      outs[i] = packed.narrow(0, at, outs[i].numel()).reshape(shapes[i]);
      at += tessera::numel(shapes[i]);
    }
    return outs;
  }

  static std::string function_name() {
    if constexpr (requires { Derived::name(); }) {
      return std::string(Derived::name());
    } else {
      return std::string("custom function ") + typeid(Derived).name();
    }
  }
  template <class T>
  static void collect(std::vector<Tensor>& inputs, std::vector<bool>& is_tensor, const T& arg) {
    if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) inputs.push_back(arg);
    is_tensor.push_back(std::is_same_v<std::decay_t<T>, Tensor>);
  }
};

}  // namespace tessera::autograd
