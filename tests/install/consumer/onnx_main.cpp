// The installed ONNX library: export a model, load it back with <tessera/onnx.h>, run it.
#include <iostream>

#include <tessera/nn/layers.h>
#include <tessera/onnx.h>
#include <tessera/tessera.h>

int main() {
  tessera::manual_seed(2);
  tessera::nn::Linear layer(4, 3);
  const tessera::Tensor x = tessera::randn({5, 4});
  tessera::onnx::export_model(layer, x, "consumer_linear.onnx");
  const tessera::onnx::Model model = tessera::onnx::Model::load("consumer_linear.onnx");
  const tessera::Tensor ours = layer(x), theirs = model.run({x})[0];
  const float diff = tessera::amax(tessera::abs(tessera::sub(ours, theirs))).item<float>();
  if (diff > 1e-5f) {
    std::cerr << "the re-imported model differs by " << diff << "\n";
    return 1;
  }
  std::cout << "onnx consumer ok: " << model.op_types().size() << " op types\n";
  return 0;
}
