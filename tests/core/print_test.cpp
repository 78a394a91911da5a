// Printing follows PyTorch's repr closely enough to read like it.
#include <cmath>
#include <sstream>

#include "support/checks.h"

using namespace tessera;

TEST_CASE("repr of floats, integers, bools, 0-d, empty and large tensors") {
  CHECK(arange(0.0, 4.0, 1.0).reshape({2, 2}).str() == "tensor([[0., 1.],\n        [2., 3.]])");
  CHECK(from_vector<float>({1.5f, -0.25f}, {2}).str() == "tensor([ 1.5000, -0.2500])");
  CHECK(from_vector<int32_t>({1, -20}, {2}).str() == "tensor([  1, -20], dtype=int32)");
  CHECK(from_vector<int64_t>({3}, {1}).str() == "tensor([3])");
  CHECK(from_vector<bool>({true, false}, {2}).str() == "tensor([ True, False])");
  CHECK(scalar_tensor(2.5, DType::f64).str() == "tensor(2.5000, dtype=float64)");
  CHECK(zeros({0, 3}).str() == "tensor([], size=(0, 3))");
  CHECK(from_vector<float>({NAN, INFINITY}, {2}).str() == "tensor([nan, inf])");
  CHECK(from_vector<float>({1e-6f, 1.0f}, {2}).str() == "tensor([1.0000e-06, 1.0000e+00])");
  const std::string big = arange(0.0, 2000.0).str();
  CHECK(big.find("...") != std::string::npos);
  CHECK(big.size() < 100);
  std::ostringstream os;
  os << ones({1}, DType::f16);
  CHECK(os.str() == "tensor([1.], dtype=float16)");
  CHECK(Tensor().str() == "tensor(undefined)");
}

TEST_CASE("a shape prints as libtorch prints sizes") {
  std::ostringstream os;
  os << zeros({2, 3, 0}).shape() << " " << Shape{} << " " << Shape{7};
  CHECK(os.str() == "[2, 3, 0] [] [7]");
}
