// libtorch peers (Debian's libtorch 1.13, CPU): the same MLP and CNN training steps, conv2d and
// tiny-op overhead as the engine's cases. Compiled only when Torch is found. Torch owns the
// threads here, so OpenBLAS is pinned to one thread while a torch peer runs (otherwise the two
// thread pools oversubscribe the cores).
#include <torch/torch.h>

#include <memory>

#include "peers.h"

extern "C" void openblas_set_num_threads(int);

namespace tessera::bench::peers {
namespace {

// Changing torch's pool size is costly, so it is set only when it differs.
void torch_threads(int threads) {
  openblas_set_num_threads(1);
  static int current = -1;
  if (current != threads) torch::set_num_threads(threads), current = threads;
}

struct TrainState {
  torch::nn::Sequential model;
  std::unique_ptr<torch::optim::Adam> opt;
  torch::Tensor x, y;
  void step() {
    opt->zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt->step();
  }
};

std::optional<Peer> train_peer(torch::nn::Sequential model, int64_t batch, int threads) {
  torch::manual_seed(0);
  auto s = std::make_shared<TrainState>();
  s->model = model;
  s->opt = std::make_unique<torch::optim::Adam>(s->model->parameters(), torch::optim::AdamOptions(1e-3));
  s->x = torch::randn({batch, 1, 28, 28});
  s->y = torch::randint(0, 10, {batch}, torch::kLong);
  return Peer{"libtorch", [s, threads] {
                torch_threads(threads);
                s->step();
              }};
}
}  // namespace

bool have_torch() { return true; }

std::optional<Peer> torch_mlp_step(int64_t batch, int threads) {
  namespace nn = torch::nn;
  return train_peer(nn::Sequential(nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 128), nn::ReLU(), nn::Linear(128, 10)),
                    batch, threads);
}

std::optional<Peer> torch_cnn_step(int64_t batch, int threads) {
  namespace nn = torch::nn;
  return train_peer(
      nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2),
                     nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2),
                     nn::Flatten(), nn::Linear(3136, 128), nn::ReLU(), nn::Linear(128, 10)),
      batch, threads);
}

std::optional<Peer> torch_conv2d(int64_t n, int64_t c, int64_t h, int64_t o, bool grad_x, bool grad_w, int threads) {
  auto x = std::make_shared<torch::Tensor>(torch::randn({n, c, h, h}).requires_grad_(grad_x));
  auto w = std::make_shared<torch::Tensor>(torch::randn({o, c, 3, 3}).requires_grad_(grad_w));
  return Peer{"libtorch", [=] {
                torch_threads(threads);
                auto y = torch::conv2d(*x, *w, {}, 1, 1);
                if (grad_x || grad_w) y.sum().backward();
              }};
}

std::optional<Peer> torch_add_1elem(int calls, int threads) {
  auto a = std::make_shared<torch::Tensor>(torch::ones({1}));
  auto b = std::make_shared<torch::Tensor>(torch::ones({1}));
  return Peer{"libtorch", [=] {
                torch_threads(threads);
                for (int i = 0; i < calls; ++i) (void)torch::add(*a, *b);
              }};
}

}  // namespace tessera::bench::peers
