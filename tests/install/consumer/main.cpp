// A program that only sees the installed headers and library: tensors and nn, the
// optimizer-before-to() loop on every device present, a custom autograd Function, and a custom
// loop's checkpoint resumed bit for bit.
#include <iostream>
#include <string>
#include <vector>

#include <tessera/backend/registry.h>
#include <tessera/nn/checkpoint.h>
#include <tessera/nn/layers.h>
#include <tessera/nn/optim.h>
#include <tessera/tessera.h>

using tessera::Tensor;

namespace {
struct ClampST : tessera::autograd::Function<ClampST> {  // clamp with a straight-through gradient
  static Tensor forward(tessera::autograd::FunctionCtx*, const Tensor& x, double lo, double hi) { return tessera::clamp(x, lo, hi); }
  static std::vector<Tensor> backward(tessera::autograd::FunctionCtx*, const std::vector<Tensor>& g) { return {g[0]}; }
};

int fail(const std::string& what) {
  std::cerr << "consumer: " << what << "\n";
  return 1;
}

// libtorch's order: the optimizer first, then the move. The weights must still train.
bool optimizer_then_to(tessera::Device device, std::string& why) {
  tessera::manual_seed(1);
  tessera::nn::Linear layer(4, 1);
  tessera::nn::SGD opt(layer.parameters(), tessera::nn::OptimOptions{.lr = 0.1});
  layer.to(device);
  const Tensor x = tessera::randn({32, 4}).to(device);
  const Tensor y = tessera::sum(x, {1}, true);
  const Tensor before = layer.weight.to(tessera::kCPU).clone();
  float first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    Tensor loss = tessera::mean(tessera::square(tessera::sub(layer(x), y)));
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<float>();
  }
  const bool moved = tessera::amax(tessera::abs(tessera::sub(layer.weight.to(tessera::kCPU), before))).item<float>() > 0;
  why = device.str() + ": loss " + std::to_string(first) + " -> " + std::to_string(last);
  return moved && last < first * 0.5f;
}
}  // namespace

int main() {
  const Tensor a = tessera::ones({2, 3});
  const Tensor b = tessera::matmul(a, a.mT());
  const float total = tessera::sum(b).item<float>();
  if (total != 12.0f) return fail("unexpected sum " + std::to_string(total));
  tessera::nn::Linear layer(3, 2);
  Tensor y = layer(a);
  tessera::sum(y).backward();
  if (!layer.weight.grad().defined()) return fail("no gradient through the installed nn library");

  for (tessera::DeviceType t : {tessera::DeviceType::cpu, tessera::DeviceType::emulated, tessera::DeviceType::kokkos}) {
    tessera::Backend* backend = tessera::find_backend(t);
    if (!backend || backend->device_count() == 0) continue;
    std::string why;
    if (!optimizer_then_to(tessera::Device(t, 0), why)) return fail("the optimizer-before-to() loop did not train: " + why);
    std::cout << "optimizer before to(): trains on " << why << "\n";
  }

  const Tensor x = tessera::from_vector<float>({-3, 0.5f, 2}, {3}).set_requires_grad(true);
  tessera::sum(tessera::mul(ClampST::apply(x, -1.0, 1.0), 2.0)).backward();
  if (x.grad().to_vector<float>() != std::vector<float>{2, 2, 2}) return fail("the custom Function's gradient is wrong");

  tessera::nn::Adam opt(layer.parameters(), tessera::nn::OptimOptions{});
  const std::string path = "consumer_checkpoint.safetensors";
  tessera::nn::save_checkpoint(path, {&layer, &opt}, 3, {{"note", "consumer"}});
  tessera::nn::Linear other(3, 2);
  tessera::nn::Adam other_opt(other.parameters(), tessera::nn::OptimOptions{});
  if (tessera::nn::load_checkpoint(path, {&other, &other_opt}, true).metadata.at("note") != "consumer")
    return fail("checkpoint metadata lost");
  if (other.weight.to_vector<float>() != layer.weight.to_vector<float>()) return fail("the checkpoint's weights differ");
  std::cout << "consumer ok: " << b << "\n";
  return 0;
}
