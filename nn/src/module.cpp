#include "tessera/nn/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <typeinfo>
#include <sstream>

namespace tessera::nn {

Tensor Module::forward(const Tensor&) {
  throw Error(name() + ": forward(x) is not supported; call this module's own forward overload");
}

void Module::register_parameter(std::string name, Tensor* slot) {
  if (slot->defined() && !slot->requires_grad()) slot->set_requires_grad(true);
  params_.emplace_back(std::move(name), slot);
}
void Module::register_buffer(std::string name, Tensor* slot) { buffers_.emplace_back(std::move(name), slot); }

void Module::collect(const std::string& prefix, bool params, std::vector<std::pair<std::string, Tensor*>>& out) const {
  for (const auto& [n, slot] : params ? params_ : buffers_) {
    if (slot->defined()) out.emplace_back(prefix + n, slot);
  }
  for (const auto& [n, child] : children_) child->collect(prefix + n + ".", params, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect("", true, slots);
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [n, s] : slots) out.emplace_back(n, *s);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect("", false, slots);
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [n, s] : slots) out.emplace_back(n, *s);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& t : parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::to(Device device, std::optional<DType> dtype) {
  NoGradGuard no_grad;
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect("", true, slots);
  for (auto& [n, s] : slots) {
    Tensor moved = s->to(device);
    if (dtype && is_floating(moved.dtype())) moved = moved.to(*dtype);
    if (moved.is_same(*s)) continue;
    // In place, as libtorch's module.to(): the parameter keeps its tensor object and only its
    // storage, layout and dtype change, so an optimizer built before the move (holding the same
    // tensors) steps the moved weights. Replacing the tensor left such an optimizer stepping
    // copies the model never reads: silent no-training. A gradient moves with its parameter.
    TensorImpl& impl = *s->impl_ptr();
    const TensorImpl& from = *moved.impl_ptr();
    impl.storage = from.storage;
    impl.shape = from.shape;
    impl.strides = from.strides;
    impl.offset = from.offset;
    impl.dtype = from.dtype;
    if (impl.autograd && impl.autograd->grad.defined()) {
      Tensor g = impl.autograd->grad.to(device);
      impl.autograd->grad = dtype && is_floating(g.dtype()) ? g.to(*dtype) : g;
    }
    if (!s->requires_grad()) s->set_requires_grad(true);
  }
  slots.clear();
  collect("", false, slots);
  for (auto& [n, s] : slots) {
    Tensor moved = s->to(device);
    if (dtype && is_floating(moved.dtype())) moved = moved.to(*dtype);
    *s = moved;
  }
}

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [n, t] : named_parameters()) out[n] = t.detach();
  for (auto& [n, t] : named_buffers()) out[n] = t;
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect("", true, slots);
  collect("", false, slots);
  std::set<std::string> known;
  std::vector<std::string> missing;
  for (auto& [n, s] : slots) {
    known.insert(n);
    auto it = state.find(n);
    if (it == state.end()) {
      missing.push_back(n);
      continue;
    }
    TESSERA_CHECK(it->second.shape() == s->shape(), "load_state_dict", "shape mismatch for '", n, "': checkpoint has ",
                  shape_str(it->second.shape()), ", module has ", shape_str(s->shape()));
    // Floating values may change precision (f32 checkpoint, bf16 model); anything else must
    // match exactly: F32 bytes relabelled I32 would load as garbage integers.
    const DType have = it->second.dtype(), want = s->dtype();
    TESSERA_CHECK(have == want || (is_floating(have) && is_floating(want)), "load_state_dict", "dtype mismatch for '", n,
                  "': checkpoint has ", have, ", module has ", want);
  }
  std::vector<std::string> unexpected;
  for (auto& [n, t] : state) {
    if (!known.count(n)) unexpected.push_back(n);
  }
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::ostringstream os;
    os << "load_state_dict: ";
    if (!missing.empty()) {
      os << "missing keys:";
      for (auto& k : missing) os << " '" << k << "'";
    }
    if (!unexpected.empty()) {
      os << (missing.empty() ? "" : "; ") << "unexpected keys:";
      for (auto& k : unexpected) os << " '" << k << "'";
    }
    throw Error(os.str());
  }
  NoGradGuard no_grad;
  for (auto& [n, s] : slots) {
    auto it = state.find(n);
    if (it != state.end()) s->copy_(it->second);
  }
}

void Module::zero_grad() {
  for (const Tensor& t : parameters()) t.set_grad(Tensor());
}

std::string Module::name() const {
  int status = 0;
  const char* raw = typeid(*this).name();
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(raw, nullptr, nullptr, &status), std::free);
  std::string n = status == 0 && demangled ? demangled.get() : raw;
  if (const size_t angle = n.find('<'); angle != std::string::npos) n.erase(angle);  // templates: the name alone
  if (const size_t colon = n.rfind("::"); colon != std::string::npos) n.erase(0, colon + 2);
  return n;
}

std::string Module::str() const {
  if (children_.empty()) return describe();
  std::ostringstream os;
  os << name() << "(\n";
  for (const auto& [n, c] : children_) {
    std::string inner = c->str();
    std::string indented;
    for (char ch : inner) {
      indented += ch;
      if (ch == '\n') indented += "  ";
    }
    os << "  (" << n << "): " << indented << "\n";
  }
  os << ")";
  return os.str();
}

}  // namespace tessera::nn
