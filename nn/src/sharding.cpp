#include "sharding.h"

#include <charconv>
#include <memory>

#include "tessera/autograd.h"

namespace tessera::nn::detail {

void broadcast_tensors(dist::ProcessGroup& group, const std::vector<Tensor>& tensors, int root) {
  NoGradGuard no_grad;
  std::vector<std::unique_ptr<dist::Work>> works;
  for (const Tensor& t : tensors) works.push_back(group.broadcast(t.detach(), root));
  for (auto& w : works) w->wait();
}

Tensor flatten_padded(const std::vector<Tensor>& tensors, bool grads, int64_t padded) {
  std::vector<Tensor> parts;
  int64_t n = 0;
  for (const Tensor& p : tensors) {
    const Tensor t = grads ? (p.grad().defined() ? p.grad() : zeros(p.shape(), p.dtype(), p.device())) : p.detach();
    parts.push_back(t.reshape({-1}));
    n += p.numel();
  }
  if (padded > n) parts.push_back(zeros({padded - n}, tensors.front().dtype(), tensors.front().device()));
  return cat(parts, 0);
}

std::string optimizer_state_key(size_t group, size_t param, const std::string& name) {
  return "state." + std::to_string(group) + "." + std::to_string(param) + "." + name;
}

std::optional<OptimizerStateKey> parse_optimizer_state_key(const std::string& key) {
  if (key.rfind("state.", 0) != 0) return std::nullopt;
  OptimizerStateKey k;
  const char* at = key.data() + 6;
  const char* end = key.data() + key.size();
  for (size_t* v : {&k.group, &k.param}) {
    const auto [next, ec] = std::from_chars(at, end, *v);
    if (ec != std::errc() || next == end || *next != '.') return std::nullopt;
    at = next + 1;
  }
  k.name.assign(at, end);
  return k;
}

}  // namespace tessera::nn::detail
