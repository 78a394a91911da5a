// Bad input gives tessera::Error naming the op and the offending shapes/dtypes/axes.
#include "support/checks.h"

using namespace tessera;
using namespace tessera::test;

TEST_CASE("shape mismatches name the op and both shapes") {
  const Tensor a = zeros({2, 3}, DType::f32, device()), b = zeros({4, 3}, DType::f32, device());
  TESSERA_CHECK_THROWS_WITH(add(a, b), "add: shapes [2, 3] and [4, 3] cannot be broadcast");
  TESSERA_CHECK_THROWS_WITH(where(gt(a, 0), a, b), "where: shapes");
  TESSERA_CHECK_THROWS_WITH(matmul(a, b), "matmul: inner dimensions differ: [2, 3] @ [4, 3]");
  TESSERA_CHECK_THROWS_WITH(linear(a, zeros({5, 4}, DType::f32, device())), "linear: input [2, 3] does not match weight [5, 4]");
  TESSERA_CHECK_THROWS_WITH(a.expand({4, 3}), "expand: cannot expand [2, 3] to [4, 3]");
  TESSERA_CHECK_THROWS_WITH(Tensor(b).copy_(zeros({3, 3}, DType::f32, device())), "copy_: shapes [3, 3] and [4, 3]");
  TESSERA_CHECK_THROWS_WITH(gather(a, 0, zeros({2}, DType::i64, device())), "gather: index [2] and input [2, 3] must have the same rank");
  TESSERA_CHECK_THROWS_WITH(stack({a, b}), "stack: shapes [2, 3] and [4, 3] differ");
}

TEST_CASE("bad axes are reported with the rank") {
  const Tensor a = zeros({2, 3}, DType::f32, device());
  TESSERA_CHECK_THROWS_WITH(sum(a, {2}), "sum: axis 2 out of range for tensor of rank 2");
  TESSERA_CHECK_THROWS_WITH(sum(a, {0, -2}), "sum: axis repeated");
  TESSERA_CHECK_THROWS_WITH(softmax(a, -3), "softmax: axis -3 out of range");
  TESSERA_CHECK_THROWS_WITH(cumsum(a, 5), "cumsum: axis 5 out of range");
  TESSERA_CHECK_THROWS_WITH(argmax(a, 2), "argmax: axis 2 out of range");
  TESSERA_CHECK_THROWS_WITH(a.permute({0, 0}), "permute: axis 0 repeated");
  TESSERA_CHECK_THROWS_WITH(a.transpose(0, 2), "transpose: axis 2 out of range");
  TESSERA_CHECK_THROWS_WITH(a.slice(0, 0, 1, 0), "slice: step must be positive");
  TESSERA_CHECK_THROWS_WITH(a.narrow(1, 2, 2), "narrow: range [2, 4) out of bounds for axis 1 of size 3");
  TESSERA_CHECK_THROWS_WITH(a.select(0, 2), "select: index 2 out of range");
}

TEST_CASE("dtype problems name the dtypes") {
  const Tensor f = zeros({2, 2}, DType::f32, device());
  const Tensor i = zeros({2, 2}, DType::i64, device());
  const Tensor b = zeros({2, 2}, DType::boolean, device());
  TESSERA_CHECK_THROWS_WITH(matmul(f, i), "matmul: dtypes differ: float32 and int64");
  TESSERA_CHECK_THROWS_WITH(mean(i), "mean: expected a floating dtype, got int64");
  TESSERA_CHECK_THROWS_WITH(neg(b), "neg: not supported for dtype bool");
  TESSERA_CHECK_THROWS_WITH(sub(b, b), "sub: not supported for dtype bool");
  TESSERA_CHECK_THROWS_WITH(where(f, f, f), "where: condition must be bool, got float32");
  TESSERA_CHECK_THROWS_WITH(rand({2}, DType::i32, device()), "rand: expected a floating dtype, got int32");
  TESSERA_CHECK_THROWS_WITH(f.data<double>(), "data: tensor has dtype float32, requested float64");
  TESSERA_CHECK_THROWS_WITH(parse_dtype("float8"), "dtype: unknown dtype 'float8'");
}

TEST_CASE("undefined tensors, bad sizes and bad arguments") {
  const Tensor undefined;
  const Tensor a = zeros({2}, DType::f32, device());
  TESSERA_CHECK_THROWS_WITH(exp(undefined), "exp: input is an undefined tensor");
  TESSERA_CHECK_THROWS_WITH(add(a, undefined), "add: second operand is an undefined tensor");
  TESSERA_CHECK_THROWS_WITH(zeros({2, -1}, DType::f32, device()), "empty: negative size in shape [2, -1]");
  TESSERA_CHECK_THROWS_WITH(cat({}), "cat: expected at least one tensor");
  TESSERA_CHECK_THROWS_WITH(clamp(a, 2, 1), "clamp: min 2 is greater than max 1");
  TESSERA_CHECK_THROWS_WITH(randint(3, 3, {2}), "randint: low 3 must be < high 3");
  TESSERA_CHECK_THROWS_WITH(bernoulli({2}, 1.5), "bernoulli: p must be in [0, 1]");
  TESSERA_CHECK_THROWS_WITH(Device::parse("tpu:0"), "device: unknown device type 'tpu'");
  TESSERA_CHECK_THROWS_WITH(Device::parse("cuda:x"), "device: malformed device 'cuda:x'");
  TESSERA_CHECK_THROWS_WITH(zeros({1}, DType::f32, Device(device().type, 7)), "is not available");
}

TEST_CASE("fused optimizer updates check their operands") {
  Tensor p = zeros({3}, DType::f32, device()), g = zeros({3}, DType::f32, device());
  Tensor m = zeros({3}, DType::f32, device()), v = zeros({4}, DType::f32, device());
  TESSERA_CHECK_THROWS_WITH(adam_update_(p, g, m, v, OptimizerAttrs{}), "adam_update: exp_avg_sq [4] float32");
  Tensor wrong = zeros({3}, DType::f64, device()), none;
  OptimizerAttrs sgd;
  sgd.momentum = 0.9;
  TESSERA_CHECK_THROWS_WITH(sgd_update_(p, wrong, none, sgd), "sgd_update: gradient [3] float64");
  TESSERA_CHECK_THROWS_WITH(sgd_update_(p, g, none, sgd), "sgd_update: momentum buffer is an undefined tensor");
}
