// The example of docs/training.md, compiled and run: keep the two in sync.
#include <filesystem>

#include "support/checks.h"
#include "tessera/nn/data.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/optim.h"
using namespace tessera;

namespace {
struct Net : nn::Module {
  nn::Linear fc1{784, 128}, fc2{128, 10};
  Net() { register_module("fc1", fc1), register_module("fc2", fc2); }
  Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x.flatten(1)))); }
  std::string name() const override { return "Net"; }
};

double train_one_epoch(const std::string& data_dir, Device dev) {
  manual_seed(0);
  Net net;
  net.to(dev);
  nn::Adam opt(net.parameters(), {.lr = 1e-3});
  nn::LoaderOptions lo{.batch_size = 128, .device = dev};
  nn::DataLoader loader(nn::load_mnist_split(data_dir, "train", 4096), lo);
  loader.start_epoch(0);
  double last = 0;
  for (nn::Batch b; loader.next(b);) {
    Tensor loss = cross_entropy(net(b.x), b.y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    last = loss.item<double>();
  }
  return last;
}
}  // namespace

TEST_CASE("the docs/training.md example trains") {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
    MESSAGE("Fashion-MNIST is not installed; the example cannot run here");
    return;
  }
  const double loss = train_one_epoch(dir, test::device());
  CHECK(loss < 1.0);  // from ~2.3 at initialisation
}
