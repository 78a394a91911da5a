// Modules and layers: registration, state dicts, modes, device/dtype moves, and gradient
// checks of every layer (f64 on the test device).
#include <sstream>

#include "support/checks.h"
#include "support/gradcheck.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/models.h"
#include "tessera/nn/optim.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;

namespace {
Placement f64() { return {DType::f64, device()}; }

}  // namespace

TEST_CASE("modules register parameters, buffers and children by name") {
  auto cnn = make_cnn({DType::f32, device()});
  const auto names = cnn->named_parameters();
  CHECK(names.front().first == "0.weight");
  CHECK(names.size() == 12);
  CHECK(cnn->num_parameters() == 421834);
  const auto buffers = cnn->named_buffers();
  REQUIRE(buffers.size() == 4);
  CHECK(buffers[0].first == "1.running_mean");
  for (const Tensor& p : cnn->parameters()) CHECK(p.requires_grad());
  CHECK(cnn->str().find("(4): Conv2d(32, 64, kernel=3x3") != std::string::npos);
  cnn->eval();
  CHECK_FALSE(cnn->children()[1].second->is_training());
  cnn->train();
  CHECK(cnn->children()[1].second->is_training());
}

TEST_CASE("state_dict round trip and clear load errors") {
  manual_seed(1);
  auto a = make_mlp({DType::f32, device()});
  manual_seed(2);
  auto b = make_mlp({DType::f32, device()});
  CHECK(a->parameters()[0].to_vector<float>() != b->parameters()[0].to_vector<float>());
  b->load_state_dict(a->state_dict());
  CHECK(a->parameters()[0].to_vector<float>() == b->parameters()[0].to_vector<float>());
  StateDict sd = a->state_dict();
  sd.erase("1.bias");
  sd["extra"] = zeros({1});
  TESSERA_CHECK_THROWS_WITH(b->load_state_dict(sd), "load_state_dict: missing keys: '1.bias'; unexpected keys: 'extra'");
  b->load_state_dict(sd, false);  // non-strict ignores both
  StateDict wrong = a->state_dict();
  wrong["1.weight"] = zeros({3, 3});
  TESSERA_CHECK_THROWS_WITH(b->load_state_dict(wrong), "load_state_dict: shape mismatch for '1.weight': checkpoint has [3, 3], module has [256, 784]");
}

TEST_CASE("to(dtype) keeps parameters trainable and forward works in float64") {
  auto m = make_mlp({DType::f32, device()});
  m->to(device(), DType::f64);
  for (const Tensor& p : m->parameters()) {
    CHECK(p.dtype() == DType::f64);
    CHECK(p.requires_grad());
  }
  const Tensor y = m->forward(make_input({2, 1, 28, 28}, DType::f64, 3));
  CHECK(y.shape() == Shape{2, 10});
  sum(y).backward();
  CHECK(m->parameters()[0].grad().dtype() == DType::f64);
}

// libtorch users build the optimizer, then move the model: the move keeps the tensor objects the
// optimizer holds (it used to replace them, and the optimizer stepped copies nobody read).
TEST_CASE("an optimizer built before to() steps the moved weights, on another device and dtype") {
  Linear lin(4, 3, true, {DType::f32, kCPU});
  SGD opt(lin.parameters(), OptimOptions{.lr = 0.1});
  const Tensor w_before_handle = lin.weight;
  lin.to(device(), DType::f64);
  CHECK(lin.weight.is_same(w_before_handle));  // the same tensor object, now moved
  CHECK(lin.weight.device() == device());
  CHECK(lin.weight.dtype() == DType::f64);
  CHECK(opt.param_groups()[0].params[0].is_same(lin.weight));
  const std::vector<double> before = lin.weight.to_vector<double>();
  sum(lin.forward(make_input({5, 4}, DType::f64, 11))).backward();
  opt.step();
  CHECK(lin.weight.to_vector<double>() != before);
  // The gradient moved with its parameter.
  lin.to(kCPU, DType::f32);
  CHECK(lin.weight.grad().device() == kCPU);
  CHECK(lin.weight.grad().dtype() == DType::f32);
  TESSERA_CHECK_THROWS_WITH(SGD(std::vector<Tensor>{}, OptimOptions{}), "optimizer: got an empty parameter list");
}

namespace {
using V = std::vector<Tensor>;
// f(x, params...) evaluated through a module whose parameters are replaced by the inputs.
template <class M> std::string module_gradcheck(M& m, const Tensor& x, double tol = 1e-6) {
  std::vector<Tensor*> slots;
  V inputs = {x};
  for (auto& [n, p] : m.named_parameters()) inputs.push_back(p);
  return gradcheck(
      [&m](const V& in) {
        StateDict sd = m.state_dict();
        auto named = m.named_parameters();
        // Rebind parameter values for finite differences; autograd flows to the originals
        // because the unperturbed call passes the module's own tensors.
        bool own = true;
        for (size_t i = 0; i < named.size(); ++i) own = own && in[i + 1].is_same(named[i].second);
        if (!own) {
          NoGradGuard g;
          for (size_t i = 0; i < named.size(); ++i) sd[named[i].first] = in[i + 1];
          StateDict saved = m.state_dict();
          StateDict saved_copy;
          for (auto& [k, t] : saved) saved_copy[k] = t.clone();
          m.load_state_dict(sd);
          Tensor y = m.forward(in[0]);
          m.load_state_dict(saved_copy);
          return y;
        }
        return m.forward(in[0]);
      },
      inputs, 1e-6, tol);
}
}  // namespace

TEST_CASE("pool modules take PyTorch's arguments in its order: dilation, ceil_mode, count_include_pad") {
  const Tensor x = rand({2, 3, 7, 7}, DType::f32, device());
  MaxPool2d mp(Size2{3, 3}, Size2{2, 2}, Size2{1, 1}, Size2{1, 2}, true);
  const Tensor y = mp.forward(x);
  CHECK(y.shape() == Shape{2, 3, 4, 3});  // rows: ceil(6 / 2) + 1; columns: 7 + 2 - 4 - 1 = 4, ceil(4 / 2) + 1
  TESSERA_CHECK_CLOSE(y, to_ref(max_pool2d(x, Size2{3, 3}, Size2{2, 2}, Size2{1, 1}, Size2{1, 2}, true)));
  AvgPool2d ap(Size2{2, 2}, std::nullopt, Size2{1, 1}, true, false);
  const Tensor z = ap.forward(x);
  CHECK(z.shape() == Shape{2, 3, 4, 4});  // ceil(7 / 2) + 1 = 5, but the fifth window would start in the padding
  TESSERA_CHECK_CLOSE(z, to_ref(avg_pool2d(x, Size2{2, 2}, Size2{2, 2}, Size2{1, 1}, false, true)));
  // Counting the padding would change the border's divisor.
  CHECK(amax(abs(sub(z, avg_pool2d(x, Size2{2, 2}, Size2{2, 2}, Size2{1, 1}, true, true)))).item<float>() > 1e-3f);
}

TEST_CASE("every layer passes a finite-difference gradient check") {
  manual_seed(5);
  {
    Linear l(5, 3, true, f64());
    const std::string e = module_gradcheck(l, grad_input({4, 5}, 1));
    CHECK_MESSAGE(e.empty(), e);
  }
  {
    Conv2d c(2, 3, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, f64());
    const std::string e = module_gradcheck(c, grad_input({2, 2, 4, 4}, 2));
    CHECK_MESSAGE(e.empty(), e);
  }
  {
    LayerNorm ln({6}, 1e-5, true, f64());
    const std::string e = module_gradcheck(ln, grad_input({3, 6}, 3), 1e-5);
    CHECK_MESSAGE(e.empty(), e);
  }
  {
    Sequential s({std::make_shared<Linear>(4, 6, true, f64()), std::make_shared<GELU>(), std::make_shared<SiLU>(),
                  std::make_shared<Tanh>(), std::make_shared<Sigmoid>(), std::make_shared<Linear>(6, 2, false, f64())});
    const std::string e = module_gradcheck(s, grad_input({3, 4}, 4));
    CHECK_MESSAGE(e.empty(), e);
  }
  {
    Sequential s({std::make_shared<Conv2d>(1, 2, Size2{3, 3}, Size2{1, 1}, Size2{1, 1}, Size2{1, 1}, 1, true, f64()),
                  std::make_shared<MaxPool2d>(Size2{2, 2}), std::make_shared<AvgPool2d>(Size2{2, 1}),
                  std::make_shared<AdaptiveAvgPool2d>(Size2{1, 1}), std::make_shared<Flatten>()});
    const std::string e = module_gradcheck(s, grad_input({2, 1, 4, 4}, 5));
    CHECK_MESSAGE(e.empty(), e);
  }
  {
    // BatchNorm in training mode (running stats change between evaluations but do not feed
    // the output in training mode).
    BatchNorm2d bn(2, 1e-5, 0.1, true, f64());
    const std::string e = module_gradcheck(bn, grad_input({3, 2, 2, 2}, 6), 1e-5);
    CHECK_MESSAGE(e.empty(), e);
    BatchNorm1d bn1(3, 1e-5, 0.1, true, f64());
    const std::string e1 = module_gradcheck(bn1, grad_input({4, 3}, 7), 1e-5);
    CHECK_MESSAGE(e1.empty(), e1);
  }
  {
    Embedding emb(5, 3, f64());
    const Tensor ids = from_vector<int64_t>({1, 4, 1}, {3}).to(device());
    TESSERA_CHECK_GRAD([&](const V& in) { return embedding(in[0], ids); }, {emb.weight});
  }
  {
    Generator gen(11);
    Dropout d(0.5, &gen);
    d.eval();
    const Tensor x = grad_input({4}, 8);
    CHECK(d.forward(x).is_same(x));
  }
}

namespace {
struct MyBlock : Module {  // no name() of its own
  Tensor forward(const Tensor& x) override { return x; }
};
}  // namespace

TEST_CASE("a module without name() is named after its class, and std::cout << module prints its tree") {
  MyBlock b;
  CHECK(b.name() == "MyBlock");
  Linear lin(4, 3);
  std::ostringstream os;
  os << lin;
  CHECK(os.str() == lin.str());
  CHECK(os.str().find("Linear") == 0);
}
