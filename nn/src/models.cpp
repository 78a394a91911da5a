#include "tessera/nn/models.h"

namespace tessera::nn {

std::shared_ptr<Sequential> make_mlp(Placement p) {
  auto m = std::make_shared<Sequential>();
  m->add(std::make_shared<Flatten>())
      .add(std::make_shared<Linear>(784, 256, true, p))
      .add(std::make_shared<ReLU>())
      .add(std::make_shared<Linear>(256, 128, true, p))
      .add(std::make_shared<ReLU>())
      .add(std::make_shared<Linear>(128, 10, true, p));
  return m;
}

std::shared_ptr<Sequential> make_cnn(Placement p) {
  auto m = std::make_shared<Sequential>();
  m->add(std::make_shared<Conv2d>(1, 32, Size2{3, 3}, Size2{1, 1}, Size2{1, 1}, Size2{1, 1}, 1, true, p))
      .add(std::make_shared<BatchNorm2d>(32, 1e-5, 0.1, true, p))
      .add(std::make_shared<ReLU>())
      .add(std::make_shared<MaxPool2d>(Size2{2, 2}))
      .add(std::make_shared<Conv2d>(32, 64, Size2{3, 3}, Size2{1, 1}, Size2{1, 1}, Size2{1, 1}, 1, true, p))
      .add(std::make_shared<BatchNorm2d>(64, 1e-5, 0.1, true, p))
      .add(std::make_shared<ReLU>())
      .add(std::make_shared<MaxPool2d>(Size2{2, 2}))
      .add(std::make_shared<Flatten>())
      .add(std::make_shared<Linear>(64 * 7 * 7, 128, true, p))
      .add(std::make_shared<ReLU>())
      .add(std::make_shared<Linear>(128, 10, true, p));
  return m;
}

}  // namespace tessera::nn
