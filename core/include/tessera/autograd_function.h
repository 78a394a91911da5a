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
  static Tensor apply(Args&&... args) {
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
    Tensor out;
    {
      NoGradGuard no_grad;
      out = Derived::forward(ctx.get(), std::forward<Args>(args)...);
    }
    TESSERA_CHECK(out.defined(), function_name(), "forward returned an undefined tensor");
    out = out.detach();  // a fresh handle: forward may have returned one of its inputs
    if (!grad_enabled() || !any) return out;
    attach_backward(function_name(), inputs, out, [ctx, is_tensor, n = inputs.size()](const Tensor& g) {
      std::vector<Tensor> grads = Derived::backward(ctx.get(), std::vector<Tensor>{g});
      if (grads.size() == is_tensor.size() && grads.size() != n) {  // one per argument: keep the tensors'
        std::vector<Tensor> picked;
        for (size_t i = 0; i < grads.size(); ++i) {
          if (is_tensor[i]) picked.push_back(grads[i]);
        }
        grads = std::move(picked);
      }
      TESSERA_CHECK(grads.size() == n, function_name(), "backward returned ", grads.size(), " gradients for ", n,
                    " tensor arguments of forward");
      return grads;
    });
    return out;
  }

 private:
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
