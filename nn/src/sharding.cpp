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

std::vector<int64_t> aligned_offsets(const std::vector<Tensor>& tensors) {
  std::vector<int64_t> offsets;
  int64_t end = 0;
  for (const Tensor& t : tensors) {
    const int64_t align = std::max<int64_t>(1, kFlatParamAlignBytes / static_cast<int64_t>(itemsize(t.dtype())));
    end = (end + align - 1) / align * align;
    offsets.push_back(end);
    end += t.numel();
  }
  offsets.push_back(end);
  return offsets;
}

void zero_gaps(Tensor& flat, const std::vector<Tensor>& tensors, const std::vector<int64_t>& offsets) {
  int64_t end = 0;
  for (size_t k = 0; k <= tensors.size(); ++k) {
    const int64_t start = k < tensors.size() ? offsets[k] : flat.numel();
    if (start > end) flat.narrow(0, end, start - end).zero_();
    if (k < tensors.size()) end = offsets[k] + tensors[k].numel();
  }
}

Tensor flatten_at(const std::vector<Tensor>& tensors, const std::vector<int64_t>& offsets, bool grads, int64_t total) {
  Tensor flat = empty({total}, tensors.front().dtype(), tensors.front().device());
  for (size_t k = 0; k < tensors.size(); ++k) {
    Tensor dst = flat.narrow(0, offsets[k], tensors[k].numel());
    if (!grads) dst.copy_(tensors[k].detach().reshape({-1}));
    else if (tensors[k].grad().defined()) dst.copy_(tensors[k].grad().reshape({-1}));
    else dst.zero_();
  }
  zero_gaps(flat, tensors, offsets);
  return flat;
}

bool same_bits_on_every_rank(dist::ProcessGroup& group, const std::vector<Tensor>& tensors) {
  // FNV-1a over the bytes: equal bits give equal sums, and the two reductions (max, min) agree
  // only when every rank's sum is the same.
  uint64_t h = 1469598103934665603ull;
  for (const Tensor& t : tensors) {
    const Tensor host = t.detach().to(kCPU).contiguous();
    const auto* bytes = static_cast<const unsigned char*>(host.data_ptr());
    for (int64_t i = 0; i < host.numel() * static_cast<int64_t>(itemsize(host.dtype())); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  Tensor hi = full({1}, static_cast<double>(h >> 11), DType::f64, kCPU), lo = hi.clone();  // 53 bits: exact in a double
  group.all_reduce(hi, dist::ReduceOp::max)->wait();
  group.all_reduce(lo, dist::ReduceOp::min)->wait();
  return hi.item<double>() == lo.item<double>();
}

void average_gradients(dist::ProcessGroup& group, const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return;
  const NoGradGuard no_grad;
  int64_t n = 0;
  for (const Tensor& t : tensors) n += t.numel();
  Tensor flat = flatten_padded(tensors, true, n);
  group.all_reduce(flat, dist::ReduceOp::mean)->wait();
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    const Tensor mean = flat.narrow(0, offset, t.numel()).reshape(t.shape());
    if (t.grad().defined()) t.grad().copy_(mean);
    else t.set_grad(mean.clone());
    offset += t.numel();
  }
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
