#pragma once
// The reference models of `tessera train`.
#include "tessera/nn/layers.h"

namespace tessera::nn {

/** 784-256-128-10 multilayer perceptron with ReLU, for [N, 1, 28, 28] inputs. */
std::shared_ptr<Sequential> make_mlp(Placement p = {});
/**
 * conv3x3(1->32)-BN-ReLU-maxpool2, conv3x3(32->64)-BN-ReLU-maxpool2, flatten,
 * linear(3136->128)-ReLU, linear(128->10), for [N, 1, 28, 28] inputs.
 */
std::shared_ptr<Sequential> make_cnn(Placement p = {});

}  // namespace tessera::nn
