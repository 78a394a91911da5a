#pragma once
// Module: named parameters, buffers and child modules, train/eval mode, device/dtype moves
// and state dicts. Layers register their member tensors by address, so forward() reads
// plain members while to(), load_state_dict() and optimizers see the same tensors.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::nn {

/** Parameter and buffer tensors by dotted name ("0.weight", "bn1.running_mean"). */
using StateDict = std::map<std::string, Tensor>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /** The layer's computation; modules with other signatures throw here. */
  virtual Tensor forward(const Tensor& x);
  /** forward(x) between the module's forward hooks (the way containers call their children). */
  Tensor operator()(const Tensor& x) {
    return call([&] { return forward(x); });
  }
  /** Runs `body` -- this module's forward, of any signature -- between its forward hooks. */
  template <class Body>
  Tensor call(Body&& body) {
    for (const auto& hook : pre_hooks_) hook(*this);
    Tensor out = body();
    for (const auto& hook : post_hooks_) hook(*this, out);
    return out;
  }
  /** Called before each forward through operator() or call() (fully sharded training gathers
   *  the module's parameters here). */
  void register_forward_pre_hook(std::function<void(Module&)> hook) { pre_hooks_.push_back(std::move(hook)); }
  /** Called after each such forward with its output. */
  void register_forward_hook(std::function<void(Module&, const Tensor& output)> hook) { post_hooks_.push_back(std::move(hook)); }
  /** Type name for messages and printing ("Linear"); by default the class's own name, without
   *  its namespaces, so a custom module need not write one. */
  virtual std::string name() const;
  /** One-line description of the configuration ("Linear(784, 256)"). */
  virtual std::string describe() const { return name(); }

  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  /** Total number of parameter elements. */
  int64_t num_parameters() const;

  /** Training mode (dropout active, batch-norm uses batch statistics); recursive. */
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /** Moves parameters and buffers (floating buffers also change dtype when given). */
  void to(Device device, std::optional<DType> dtype = std::nullopt);

  StateDict state_dict() const;
  /**
   * Copies values into the module's tensors. With strict, missing and unexpected keys throw;
   * shape or dtype mismatches always throw, naming the key — before anything is modified.
   */
  void load_state_dict(const StateDict& state, bool strict = true);
  /** Clears the gradients of all parameters. */
  void zero_grad();
  /** Multi-line tree of the module ("Sequential(\n  (0): Linear(784, 256)\n ...)"). */
  std::string str() const;
  /** std::cout << model prints str(), as libtorch's operator<< for modules. */
  friend std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

 protected:
  /** Registers `*slot` as parameter `name` (requires grad). The slot must outlive the module. */
  void register_parameter(std::string name, Tensor* slot);
  void register_buffer(std::string name, Tensor* slot);
  template <class M> std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> m) {
    children_.emplace_back(std::move(name), m);
    return m;
  }
  /** Registers a member sub-module (not owned: it lives and dies with this module). */
  template <class M> M& register_module(std::string name, M& member) {
    children_.emplace_back(std::move(name), std::shared_ptr<Module>(std::shared_ptr<Module>(), &member));
    return member;
  }

 private:
  void collect(const std::string& prefix, bool params, std::vector<std::pair<std::string, Tensor*>>& out) const;
  std::vector<std::pair<std::string, Tensor*>> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  std::vector<std::function<void(Module&)>> pre_hooks_;
  std::vector<std::function<void(Module&, const Tensor&)>> post_hooks_;
};

using ModulePtr = std::shared_ptr<Module>;

}  // namespace tessera::nn
