// A bad-input sweep over the public ops: every op is called with every awkward argument in a
// small zoo (undefined, 0-d, empty, wrong rank, int/bool/f16, non-contiguous, out-of-range
// indices, tensors on another device) and every awkward integer (negative, huge, INT64_MIN)
// for its sizes and axes. Each call must either work or throw tessera::Error with an
// "<op>: ..." message: no crash, no other exception type, no sanitizer report (the suite runs
// under ASan + UBSan in CI, where signed overflow in shape arithmetic is fatal).
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>

#include "support/checks.h"

using namespace tessera;
using namespace tessera::test;

namespace {
constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
const std::vector<int64_t> kInts = {-100, -1, 0, 1, 2, 3, kMax, kMin};
const std::vector<int64_t> kFewInts = {-1, 2, kMax};

std::vector<std::pair<const char*, Tensor>> zoo() {
  const Device d = device();
  std::vector<std::pair<const char*, Tensor>> z = {
      {"undefined", Tensor()},
      {"0-d", scalar_tensor(1.5, DType::f32, d)},
      {"empty [0,3]", zeros({0, 3}, DType::f32, d)},
      {"f32 [2,3]", arange(0, 6, 1, DType::f32, d).reshape({2, 3})},
      {"i64 [2,3]", arange(6, DType::i64, d).reshape({2, 3})},
      {"bool [2,3]", ones({2, 3}, DType::boolean, d)},
      {"f16 [2,3]", ones({2, 3}, DType::f16, d)},
      {"transposed [3,2]", arange(0, 6, 1, DType::f32, d).reshape({2, 3}).mT()},
      {"rank 5", ones({1, 2, 1, 3, 1}, DType::f32, d)},
      {"rank 4 [1,2,3,3]", ones({1, 2, 3, 3}, DType::f32, d)},
      {"bad index [4]", from_vector<int64_t>({0, 5, -7, kMax}, {4}, d)},
      {"index [2]", from_vector<int64_t>({1, 0}, {2}, d)},
  };
  if (d != kCPU) z.emplace_back("cpu f32 [2,3]", ones({2, 3}, DType::f32, kCPU));
  return z;
}

struct Op {
  const char* name;
  std::function<void(const Tensor&, const Tensor&, int64_t)> call;
  int tensors;       // how many tensors from the zoo it takes (1 or 2)
  bool ints;         // whether it takes an integer from kInts
};

std::vector<Op> ops() {
  using T = const Tensor&;
  std::vector<Op> v;
  auto add1 = [&](const char* n, std::function<void(T)> f) { v.push_back({n, [f](T a, T, int64_t) { f(a); }, 1, false}); };
  auto add2 = [&](const char* n, std::function<void(T, T)> f) { v.push_back({n, [f](T a, T b, int64_t) { f(a, b); }, 2, false}); };
  auto add1i = [&](const char* n, std::function<void(T, int64_t)> f) { v.push_back({n, [f](T a, T, int64_t k) { f(a, k); }, 1, true}); };
  auto add2i = [&](const char* n, std::function<void(T, T, int64_t)> f) { v.push_back({n, f, 2, true}); };
  auto addi = [&](const char* n, std::function<void(int64_t)> f) { v.push_back({n, [f](T, T, int64_t k) { f(k); }, 0, true}); };
  // Elementwise.
  for (auto [n, f] : std::vector<std::pair<const char*, Tensor (*)(T)>>{
           {"neg", &neg}, {"abs", &tessera::abs}, {"exp", &tessera::exp}, {"log", &tessera::log}, {"sqrt", &tessera::sqrt},
           {"relu", &relu}, {"sigmoid", &sigmoid}, {"tanh", &tessera::tanh}, {"round", &tessera::round}, {"erf", &tessera::erf}}) {
    add1(n, f);
  }
  for (auto [n, f] : std::vector<std::pair<const char*, Tensor (*)(T, T)>>{
           {"add", &add}, {"sub", &sub}, {"mul", &mul}, {"div", &div}, {"pow", &pow}, {"maximum", &maximum}, {"eq", &eq},
           {"lt", &lt}, {"logical_and", &logical_and}, {"matmul", &matmul}, {"embedding", &embedding}, {"mse_loss", [](T a, T b) { return mse_loss(a, b); }}}) {
    add2(n, f);
  }
  add2("where", [](T a, T b) { where(gt(a, 0), a, b); });
  add2("clamp", [](T a, T b) { clamp(a, b, b); });
  add2("linear", [](T a, T b) { linear(a, b); });
  add2("conv2d", [](T a, T b) { conv2d(a, b); });
  add2("cross_entropy", [](T a, T b) { cross_entropy(a, b); });
  add2("nll_loss", [](T a, T b) { nll_loss(a, b); });
  add2("binary_cross_entropy_with_logits", [](T a, T b) { binary_cross_entropy_with_logits(a, b); });
  add2("dropout_add", [](T a, T b) { dropout_add(a, b, 0.5, true); });
  add2("copy_", [](T a, T b) { Tensor c = a.defined() ? a.clone() : a; c.copy_(b); });
  add2("add_", [](T a, T b) { Tensor c = a.defined() ? a.clone() : a; c.add_(b); });
  add2("cat", [](T a, T b) { cat({a, b}, 0); });
  // Aliasing in place: the tensor with itself and with an overlapping view of itself.
  add1("add_ self", [](T a) { Tensor c = a.defined() ? a.clone() : a; c.add_(c); });
  add1("copy_ transposed self", [](T a) { if (a.defined() && a.dim() == 2 && a.size(0) == a.size(1)) { Tensor c = a.clone(); c.copy_(c.mT()); } else { Tensor c = a; c.copy_(a); } });
  // Axes and sizes.
  add1i("sum", [](T a, int64_t k) { sum(a, {k}); });
  add1i("mean", [](T a, int64_t k) { mean(a, {k, k}); });
  add1i("amax", [](T a, int64_t k) { amax(a, {k}, true); });
  add1i("argmax", [](T a, int64_t k) { argmax(a, k); });
  add1i("var", [](T a, int64_t k) { var(a, {0}, k); });
  add1i("norm", [](T a, int64_t k) { norm(a, static_cast<double>(k), {0}); });
  add1i("cumsum", [](T a, int64_t k) { cumsum(a, k); });
  add1i("softmax", [](T a, int64_t k) { softmax(a, k); });
  add1i("log_softmax", [](T a, int64_t k) { log_softmax(a, k); });
  add1i("reshape", [](T a, int64_t k) { a.reshape({k, -1}); });
  add1i("view", [](T a, int64_t k) { a.view({k, 3}); });
  add1i("permute", [](T a, int64_t k) { a.permute({k, 0}); });
  add1i("transpose", [](T a, int64_t k) { a.transpose(k, 0); });
  add1i("narrow", [](T a, int64_t k) { a.narrow(0, k, 2); });
  add1i("narrow", [](T a, int64_t k) { a.narrow(1, 1, k); });
  add1i("slice", [](T a, int64_t k) { a.slice(0, k, kMax, k); });
  add1i("select", [](T a, int64_t k) { a.select(k, k); });
  add1i("expand", [](T a, int64_t k) { a.expand({k, 2, 3}); });
  add1i("squeeze", [](T a, int64_t k) { a.squeeze(k); });
  add1i("unsqueeze", [](T a, int64_t k) { a.unsqueeze(k); });
  add1i("flatten", [](T a, int64_t k) { a.flatten(k, -1); });
  add1i("split", [](T a, int64_t k) { split(a, k, 0); });
  add1i("chunk", [](T a, int64_t k) { chunk(a, k, 1); });
  add1i("broadcast_to", [](T a, int64_t k) { broadcast_to(a, {k, 3}); });
  add1i("stack", [](T a, int64_t k) { stack({a, a}, k); });
  add1i("layer_norm", [](T a, int64_t k) { layer_norm(a, k); });
  add1i("max_pool2d", [](T a, int64_t k) { max_pool2d(a, {k, k}); });
  add1i("max_pool2d", [](T a, int64_t k) { max_pool2d(a, {2, 2}, Size2{1, 1}, {k, 0}); });
  add1i("avg_pool2d", [](T a, int64_t k) { avg_pool2d(a, {1, 1}, Size2{k, k}); });
  add1i("adaptive_avg_pool2d", [](T a, int64_t k) { adaptive_avg_pool2d(a, {k, 1}); });
  add1i("dropout", [](T a, int64_t k) { dropout(a, static_cast<double>(k) / 3.0, true); });
  add1i("fill_", [](T a, int64_t k) { Tensor c = a.defined() ? a.clone() : a; c.fill_(static_cast<double>(k)); });
  add2i("conv2d", [](T a, T b, int64_t k) { conv2d(a, b, Tensor(), {k, 1}, {0, k}, {1, k}); });
  add2i("conv2d", [](T a, T b, int64_t k) { conv2d(a, b, Tensor(), {1, 1}, {0, 0}, {1, 1}, k); });
  add2i("index_select", [](T a, T b, int64_t k) { index_select(a, k, b); });
  add2i("gather", [](T a, T b, int64_t k) { gather(a, k, b); });
  add2i("scatter_add", [](T a, T b, int64_t k) { scatter_add(a, k, b, a); });
  add2i("take_along_axis", [](T a, T b, int64_t k) { take_along_axis(a, b, k); });
  add2i("one_hot", [](T, T b, int64_t k) { one_hot(b, k); });
  add2i("cat", [](T a, T b, int64_t k) { cat({a, b}, k); });
  // Creation with awkward sizes.
  addi("empty", [](int64_t k) { empty({k, 2}, DType::f32, device()); });
  addi("zeros", [](int64_t k) { zeros({2, k, k}, DType::f32, device()); });
  addi("arange", [](int64_t k) { arange(k, DType::i64, device()); });
  addi("arange", [](int64_t k) { arange(0.0, static_cast<double>(k), 0.5, DType::f32, device()); });
  addi("linspace", [](int64_t k) { linspace(0, 1, k, DType::f32, device()); });
  addi("eye", [](int64_t k) { eye(k, 2, DType::f32, device()); });
  addi("randn", [](int64_t k) { randn({k}, DType::f32, device()); });
  addi("randint", [](int64_t k) { randint(k, 3, {2}, DType::i64, device()); });
  addi("bernoulli", [](int64_t k) { bernoulli({2}, static_cast<double>(k), DType::f32, device()); });
  return v;
}
}  // namespace

TEST_CASE("bad-input sweep: every op works or throws tessera::Error naming itself") {
  const auto z = zoo();
  int64_t cases = 0, errors = 0;
  const bool trace = std::getenv("TESSERA_SWEEP_TRACE") != nullptr;  // names the case before a crash
  for (const Op& op : ops()) {
    auto run = [&](const Tensor& a, const Tensor& b, int64_t k, const std::string& what) {
      ++cases;
      if (trace) std::fprintf(stderr, "sweep: %s %s\n", op.name, what.c_str());
      try {
        op.call(a, b, k);
      } catch (const Error& e) {
        ++errors;
        const std::string msg = e.what();
        const size_t colon = msg.find(": ");
        CHECK_MESSAGE((colon != std::string::npos && colon > 0 && msg.size() > colon + 2), (std::string(op.name) + " " + what + ": unclear message " + msg));
      } catch (const std::exception& e) {
        FAIL_CHECK((std::string(op.name) + " " + what + ": threw a non-Tessera exception: " + e.what()));
      }
    };
    const auto& ints = op.tensors == 2 ? kFewInts : kInts;
    if (op.tensors == 0) {
      for (int64_t k : ints) run(Tensor(), Tensor(), k, std::to_string(k));
      continue;
    }
    for (const auto& [an, a] : z) {
      if (op.tensors == 1) {
        if (!op.ints) run(a, Tensor(), 0, an);
        else for (int64_t k : ints) run(a, Tensor(), k, std::string(an) + ", " + std::to_string(k));
        continue;
      }
      for (const auto& [bn, b] : z) {
        const std::string what = std::string(an) + " / " + bn;
        if (!op.ints) run(a, b, 0, what);
        else for (int64_t k : ints) run(a, b, k, what + ", " + std::to_string(k));
      }
    }
  }
  MESSAGE("bad-input sweep: ", cases, " calls, ", errors, " clear errors, ", cases - errors, " valid");
  CHECK(cases > 5000);
}
