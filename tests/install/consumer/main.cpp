// A program that only sees the installed headers and library.
#include <iostream>

#include <tessera/nn/layers.h>
#include <tessera/tessera.h>

int main() {
  const tessera::Tensor a = tessera::ones({2, 3});
  const tessera::Tensor b = tessera::matmul(a, a.mT());
  const float total = tessera::sum(b).item<float>();
  if (total != 12.0f) {
    std::cerr << "unexpected sum " << total << "\n";
    return 1;
  }
  tessera::nn::Linear layer(3, 2);
  tessera::Tensor y = layer(a);
  tessera::sum(y).backward();
  if (!layer.weight.grad().defined()) {
    std::cerr << "no gradient through the installed nn library\n";
    return 1;
  }
  std::cout << "consumer ok: " << b << "\n";
  return 0;
}
