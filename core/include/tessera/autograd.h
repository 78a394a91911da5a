#pragma once
// Reverse-mode automatic differentiation. Ops record a Node on their output when grad mode
// is on and an input requires grad; Tensor::backward() walks the graph in reverse
// topological order. Every rule (vjp) is written with public ops, so every backend gets
// backward for free. The graph is freed after backward unless retain_graph is set.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera {

class Node;

/** Where a gradient flows: input `input_nr` of `node` (a grad-accumulator for leaves). */
struct Edge {
  std::shared_ptr<Node> node;
  Shape shape;   // the input's shape: incoming gradients are summed down to it (broadcasting)
  DType dtype = DType::f32;  // and converted to its dtype
};

using TensorHook = std::function<Tensor(const Tensor&)>;

/** One recorded op: maps the gradient of its output to gradients of its inputs. */
class Node {
 public:
  virtual ~Node() = default;
  /** One gradient per edge in `next` (undefined = no gradient). */
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  /** Drops saved tensors; a released node cannot run again. */
  virtual void release() {}
  virtual std::string name() const = 0;
  std::vector<Edge> next;
  std::vector<TensorHook> pre_hooks;  ///< run on the incoming gradient (Tensor::register_hook)
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;      ///< null for leaves
  std::shared_ptr<Node> accumulator;  ///< leaves: the node that accumulates into `grad`
  /** Leaves: run after each gradient is added into `grad` (Tensor::register_post_accumulate_grad_hook). */
  std::vector<std::function<void(const Tensor&)>> post_accumulate_hooks;
};

/** True when ops record the graph on this thread (default true). */
bool grad_enabled();
void set_grad_enabled(bool on);

/** Disables recording for its scope (like torch.no_grad()). */
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/**
 * Anomaly detection (off by default; process-wide): every recorded op checks its output and
 * the backward pass checks every gradient it computes, throwing tessera::Error naming the first
 * op that produced a NaN or Inf ("anomaly: forward of 'log' produced ..."). One host sync per
 * op: a debugging mode, like torch.autograd.detect_anomaly.
 */
bool anomaly_detection();
void set_anomaly_detection(bool on);

class AnomalyGuard {
 public:
  explicit AnomalyGuard(bool on = true) : prev_(anomaly_detection()) { set_anomaly_detection(on); }
  ~AnomalyGuard() { set_anomaly_detection(prev_); }
  AnomalyGuard(const AnomalyGuard&) = delete;
  AnomalyGuard& operator=(const AnomalyGuard&) = delete;

 private:
  bool prev_;
};

/** True when every element of `t` is finite (integer and bool tensors always are); syncs. */
bool all_finite(const Tensor& t);

/** True when every element of every tensor is finite (undefined tensors count as finite): one
 *  reduction per tensor, summed per device, one sync per device. */
bool all_finite(const std::vector<Tensor>& tensors);

/**
 * Back-propagates from `roots` with `grads` (one per root; undefined means ones for a
 * scalar root). Throws if a root does not require grad or a non-scalar root has no grad.
 */
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {}, bool retain_graph = false);

}  // namespace tessera
