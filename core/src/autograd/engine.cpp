// The backward engine and the Tensor autograd methods.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <unordered_map>
#include <optional>
#include <unordered_set>

#include "record.h"
#include "tessera/autograd_function.h"
#include "tessera/profiler.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduction.h"

namespace tessera {

namespace {
thread_local bool t_grad_enabled = true;
std::atomic<bool> g_anomaly{false};

AutogradMeta* meta_of(const Tensor& t) { return t.defined() ? t.impl().autograd.get() : nullptr; }
AutogradMeta& ensure_meta(const Tensor& t) {
  auto& m = t.impl().autograd;
  if (!m) m = std::make_shared<AutogradMeta>();
  return *m;
}

// Accumulates into a leaf's .grad. Holds the leaf weakly: the graph must not keep
// parameters alive, and a leaf that died has nobody to receive its gradient.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {}
  std::vector<Tensor> apply(const Tensor& grad) override {
    if (auto impl = leaf_.lock()) {
      AutogradMeta& m = *impl->autograd;
      if (!m.grad.defined()) {
        // .grad is updated in place by optimizers and clipping, so it must not alias anything
        // else: incoming gradients may (add's vjp hands the same tensor to both inputs; a hook
        // may keep one). A gradient nothing else holds -- neither its tensor nor its storage --
        // is taken as it is, as PyTorch's AccumulateGrad does; any other is copied (a full
        // read and write of the parameter's size: a quarter of a max-pool's backward).
        const bool sole_owner = grad.impl_ptr().use_count() == 1 && grad.storage().use_count() == 1 &&
                                grad.is_contiguous() && !grad.requires_grad();
        m.grad = sole_owner ? grad.detach() : grad.clone();
      } else {
        m.grad = add(m.grad, grad);
      }
      if (!m.post_accumulate_hooks.empty()) {
        const Tensor leaf(impl);
        for (const auto& hook : m.post_accumulate_hooks) hook(leaf);
      }
    }
    return {};
  }
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, autograd::BackwardFn fn) : name_(name), fn_(std::move(fn)) {}
  std::vector<Tensor> apply(const Tensor& grad) override {
    if (!fn_) {
      throw Error(detail::concat("backward: ", name_,
                                 " was already used by a backward pass and its saved tensors freed "
                                 "(pass retain_graph=true to backward twice)"));
    }
    return fn_(grad);
  }
  void release() override { fn_ = nullptr; }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  autograd::BackwardFn fn_;
};

// The node a gradient for `t` flows into, or null when t needs none.
std::shared_ptr<Node> gradient_edge(const Tensor& t) {
  AutogradMeta* m = meta_of(t);
  if (!m || !m->requires_grad) return nullptr;
  if (m->grad_fn) return m->grad_fn;
  if (!m->accumulator) m->accumulator = std::make_shared<AccumulateGrad>(t.impl_ptr());
  return m->accumulator;
}
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }

namespace autograd {

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs) {
    if (const AutogradMeta* m = t ? meta_of(*t) : nullptr; m && m->requires_grad) return true;
  }
  return false;
}

void record(const char* name, std::vector<Tensor> inputs, Tensor& out, BackwardFn fn) {
  if (g_anomaly.load(std::memory_order_relaxed) && !all_finite(out)) {
    throw Error(detail::concat("anomaly: forward of '", name, "' produced a non-finite value (output ", shape_str(out.shape()),
                               " ", out.dtype(), ", inputs", [&] {
                                 std::string s;
                                 for (const Tensor& in : inputs) s += " " + (in.defined() ? shape_str(in.shape()) : "-");
                                 return s;
                               }(), ")"));
  }
  auto node = std::make_shared<FunctionNode>(name, std::move(fn));
  node->next.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    Edge e;
    if (in.defined()) {
      e.node = gradient_edge(in);
      e.shape = in.shape();
      e.dtype = in.dtype();
    }
    node->next.push_back(std::move(e));
  }
  AutogradMeta& m = ensure_meta(out);
  m.requires_grad = true;
  m.grad_fn = std::move(node);
}

Tensor saved(const Tensor& t) { return t.defined() ? t.detach() : t; }

void attach_backward(const std::string& name, const std::vector<Tensor>& inputs, Tensor& output,
                     std::function<std::vector<Tensor>(const Tensor&)> backward) {
  TESSERA_CHECK(output.defined(), name, "the output to attach a backward to is undefined");
  TESSERA_CHECK(static_cast<bool>(backward), name, "no backward function given");
  // The op front-ends' own mechanism (anomaly checks included); FunctionNode copies the name.
  record(name.c_str(), inputs, output, std::move(backward));
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  TESSERA_CHECK(lead >= 0, "backward", "gradient of shape ", shape_str(g.shape()), " cannot be reduced to ",
                shape_str(shape));
  Axes axes;
  for (int64_t d = 0; d < g.dim(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) axes.push_back(d);
  }
  Tensor r = axes.empty() ? g : sum(g, axes, true);
  if (lead > 0) r = r.reshape(shape);
  TESSERA_CHECK(r.shape() == shape, "backward", "gradient of shape ", shape_str(g.shape()),
                " does not match input shape ", shape_str(shape));
  return r;
}

}  // namespace autograd

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  NoGradGuard no_grad;
  std::unordered_map<Node*, Tensor> pending;
  std::vector<std::shared_ptr<Node>> starts;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    TESSERA_CHECK(r.defined() && r.requires_grad(), "backward", "tensor does not require grad and has no grad_fn");
    Tensor g = i < grads.size() ? grads[i] : Tensor();
    if (!g.defined()) {
      TESSERA_CHECK(r.numel() == 1, "backward", "grad can be implicitly created only for scalar outputs, got shape ",
                    shape_str(r.shape()));
      g = ones(r.shape(), r.dtype(), r.device());
    }
    TESSERA_CHECK(g.shape() == r.shape(), "backward", "grad shape ", shape_str(g.shape()), " does not match tensor shape ",
                  shape_str(r.shape()));
    auto node = gradient_edge(r);
    auto [it, fresh] = pending.emplace(node.get(), g);
    if (!fresh) it->second = add(it->second, g);
    starts.push_back(node);
  }
  // Count, for every reachable node, how many edges point at it.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (auto& s : starts) {
    if (seen.insert(s.get()).second) stack.push_back(s.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.node) continue;
      ++deps[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  std::vector<std::shared_ptr<Node>> ready;
  for (auto& s : starts) {
    if (deps[s.get()] == 0 && std::find(ready.begin(), ready.end(), s) == ready.end()) ready.push_back(s);
  }
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.back();
    ready.pop_back();
    Tensor grad = std::move(pending[node.get()]);
    pending.erase(node.get());
    for (const auto& hook : node->pre_hooks) {
      Tensor replaced = hook(grad);
      if (replaced.defined()) grad = replaced;
    }
    std::optional<profile::Scope> span;  // built only while profiling: the name costs a string
    if (profile::scopes_active()) span.emplace(node->name() + " backward", "autograd");
    std::vector<Tensor> in_grads = node->apply(grad);
    span.reset();
    if (g_anomaly.load(std::memory_order_relaxed)) {
      for (size_t i = 0; i < in_grads.size(); ++i) {
        TESSERA_CHECK(!in_grads[i].defined() || all_finite(in_grads[i]), "anomaly", "backward of '", node->name(),
                      "' produced a non-finite gradient for its input ", i, " ", shape_str(in_grads[i].shape()),
                      all_finite(grad) ? " from a finite incoming gradient" : "");
      }
    }
    if (!retain_graph) node->release();
    for (size_t i = 0; i < node->next.size(); ++i) {
      const Edge& e = node->next[i];
      if (!e.node) continue;
      Tensor g = i < in_grads.size() ? in_grads[i] : Tensor();
      if (g.defined()) {
        g = autograd::sum_to(g, e.shape);
        if (g.dtype() != e.dtype) g = g.to(e.dtype);
        auto [it, fresh] = pending.emplace(e.node.get(), g);
        if (!fresh) it->second = add(it->second, g);
      }
      if (--deps[e.node.get()] == 0) {
        if (pending.count(e.node.get())) ready.push_back(e.node);
        else deps.erase(e.node.get());  // no gradient arrived: nothing flows further
      }
    }
  }
}

bool anomaly_detection() { return g_anomaly.load(std::memory_order_relaxed); }
void set_anomaly_detection(bool on) { g_anomaly.store(on, std::memory_order_relaxed); }

bool all_finite(const Tensor& t) { return all_finite(std::vector<Tensor>{t}); }

bool all_finite(const std::vector<Tensor>& tensors) {
  NoGradGuard no_grad;
  // x * 0 is 0 for finite x and NaN for NaN or Inf: one sum per tensor, added up per device
  // on the device, so the host waits once per device rather than once per tensor.
  std::vector<std::pair<Device, Tensor>> probes;
  for (const Tensor& t : tensors) {
    if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) continue;
    const Tensor probe = sum(mul(t.detach(), 0.0)).to(DType::f32);
    auto it = std::find_if(probes.begin(), probes.end(), [&](const auto& q) { return q.first == t.device(); });
    if (it == probes.end()) probes.emplace_back(t.device(), probe);
    else it->second = add(it->second, probe);
  }
  for (const auto& probe : probes) {
    if (!std::isfinite(probe.second.item<double>())) return false;
  }
  return true;
}

// ---- Tensor methods ----

bool Tensor::requires_grad() const {
  const AutogradMeta* m = meta_of(*this);
  return m && m->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool on) {
  if (on) {
    TESSERA_CHECK(is_floating(dtype()), "requires_grad", "only floating tensors can require grad, got ", dtype());
    TESSERA_CHECK(is_leaf(), "requires_grad", "can only be changed on leaf tensors (use detach())");
  }
  if (on || meta_of(*this)) ensure_meta(*this).requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = meta_of(*this);
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const { ensure_meta(*this).grad = grad; }

bool Tensor::is_leaf() const {
  const AutogradMeta* m = meta_of(*this);
  return !m || !m->grad_fn;
}

std::string Tensor::grad_fn_name() const {
  const AutogradMeta* m = meta_of(*this);
  return m && m->grad_fn ? m->grad_fn->name() : std::string();
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  tessera::backward({*this}, {grad}, retain_graph);
}

Tensor Tensor::detach() const {
  return detail::make_tensor(storage(), shape(), strides(), offset(), dtype());
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  TESSERA_CHECK(requires_grad() && is_leaf(), "register_post_accumulate_grad_hook",
                "expected a leaf tensor that requires grad (a parameter), got ",
                requires_grad() ? "a non-leaf" : "a tensor without requires_grad");
  gradient_edge(*this);  // the accumulator exists from now on, whatever backward reaches it
  ensure_meta(*this).post_accumulate_hooks.push_back(std::move(hook));
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  TESSERA_CHECK(requires_grad(), "register_hook", "cannot register a hook on a tensor that does not require grad");
  gradient_edge(*this)->pre_hooks.push_back(std::move(hook));
}

void Tensor::retain_grad() const {
  TESSERA_CHECK(requires_grad(), "retain_grad", "tensor does not require grad");
  if (is_leaf()) return;
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  register_hook([weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      AutogradMeta& m = *impl->autograd;
      m.grad = m.grad.defined() ? add(m.grad, g) : g;
    }
    return Tensor();
  });
}

}  // namespace tessera
