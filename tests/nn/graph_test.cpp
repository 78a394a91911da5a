// Graph capture (DeviceGraph): replays recompute captured work on new inputs, captured regions
// refuse host reads and random ops, and a training run that replays its captured step ends
// with parameters bit-identical to the same run done eagerly. Backends that cannot capture
// (cpu, kokkos) refuse capture_begin with a clear error.
#include "support/checks.h"
#include "tessera/graph.h"
#include "tessera/nn/models.h"
#include "tessera/nn/trainer.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;

TEST_CASE("graph capture: a replay recomputes the captured ops on the inputs' current contents") {
  if (!DeviceGraph::supported(device())) {
    DeviceGraph g(device());
    CHECK_THROWS_WITH_AS(g.capture_begin(), doctest::Contains("graph capture: not supported on"), Error);
    return;
  }
  const Tensor x = make_input({8, 16}, DType::f32, 1), w = make_input({16, 4}, DType::f32, 2);
  DeviceGraph g(device());
  g.capture_begin();
  const Tensor y = add(relu(matmul(x, w)), 1.0);
  g.capture_end();
  CHECK(g.nodes() >= 3);
  g.replay();
  TESSERA_CHECK_CLOSE(y, to_ref(add(relu(matmul(x, w)), 1.0)));
  Tensor x2 = x;
  x2.copy_(make_input({8, 16}, DType::f32, 3));  // new input, same memory
  g.replay();
  TESSERA_CHECK_CLOSE(y, to_ref(add(relu(matmul(x2, w)), 1.0)));
  CHECK_THROWS_WITH_AS(g.capture_begin(), doctest::Contains("already captured"), Error);
}

TEST_CASE("graph capture: host reads and random ops inside a capture are errors") {
  if (!DeviceGraph::supported(device())) return;
  const Tensor x = make_input({4, 4}, DType::f32, 4);
  {
    DeviceGraph g(device());
    g.capture_begin();
    const Tensor s = sum(x);
    CHECK_THROWS_WITH_AS((void)s.item<double>(), doctest::Contains("graph capture"), Error);
    g.capture_end();
  }
  {
    DeviceGraph g(device());
    g.capture_begin();
    CHECK_THROWS_WITH_AS((void)rand({4}, DType::f32, device()), doctest::Contains("random ops cannot be captured"), Error);
    g.capture_end();
  }
  // After the captures the device works normally again.
  CHECK(sum(x).item<double>() == doctest::Approx(sum(x.to(kCPU)).item<double>()).epsilon(1e-6));
}

namespace {
// 10 optimizer steps of the MLP on 640 synthetic images, eagerly or replaying a captured step.
std::vector<Tensor> train_mlp(bool graph, int64_t* replays) {
  manual_seed(7);
  ImageSet data;
  data.images = rand({640, 1, 28, 28}, DType::f32, kCPU);
  data.labels = randint(0, 10, {640}, DType::i64, kCPU);
  auto model = make_mlp(Placement{DType::f32, device()});
  OptimOptions oo;
  oo.lr = 1e-3;
  Adam opt(model->parameters(), oo);
  LoaderOptions lo;
  lo.batch_size = 64;
  lo.device = device();
  lo.seed = 1;
  DataLoader loader(std::move(data), lo);
  Trainer trainer(*model, opt);
  TrainOptions to;
  to.graph = graph;
  const auto history = trainer.fit(loader, nullptr, to);
  *replays = history.front().graph_replays;
  std::vector<Tensor> params;
  for (const Tensor& p : model->parameters()) params.push_back(p.to(kCPU));
  return params;
}
}  // namespace

TEST_CASE("graph capture: 10 training steps replaying the captured step match eager training bit for bit") {
  int64_t eager_replays = 0, graph_replays = 0;
  const auto eager = train_mlp(false, &eager_replays);
  const auto graphed = train_mlp(true, &graph_replays);
  CHECK(eager_replays == 0);
  CHECK(graph_replays == (DeviceGraph::supported(device()) ? 9 : 0));  // step 1 is the eager warm-up
  REQUIRE(eager.size() == graphed.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    CAPTURE(i);
    CHECK(eager[i].to_vector<float>() == graphed[i].to_vector<float>());
  }
}
