// The ONNX importer's own contract: TensorProto round trips for every Tessera dtype (raw and
// typed fields), clear errors for what it cannot read, unsupported ops named at load time,
// and a small hand-built graph run on every backend in the build.
#include <onnx/onnx_pb.h>

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "tessera/backend/registry.h"
#include "tessera/nn/language_model.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/models.h"
#include "tessera/nn/recurrent.h"
#include "tessera/onnx.h"
#include "tessera/tessera.h"

using namespace tessera;
namespace tonnx = tessera::onnx;

namespace {
std::vector<Device> devices() {
  std::vector<Device> out;
  for (Backend* b : registered_backends()) {
    if (b->device_count() > 0) out.emplace_back(b->device_type(), 0);
  }
  return out;
}
std::string model_bytes(const std::string& op, int64_t opset = 17) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* n = g->add_node();
  n->set_op_type(op);
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  for (const char* name : {"x", "w"}) {
    auto* in = g->add_input();
    in->set_name(name);
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(::onnx::TensorProto::FLOAT);
    for (int d = 0; d < 2; ++d) tt->mutable_shape()->add_dim()->set_dim_value(2);
  }
  auto* out = g->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  for (int d = 0; d < 2; ++d) out->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(2);
  return m.SerializeAsString();
}
}  // namespace

TEST_CASE("TensorProto round trips every dtype, through raw_data and the typed fields") {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8, DType::u8, DType::i32, DType::i64, DType::boolean}) {
    CAPTURE(dtype_name(dt));
    const Tensor t = from_doubles({0, 1, 0, 1, 1, 0}, {2, 3}, dt, kCPU);
    const Tensor back = tonnx::tensor_from_proto_bytes(tonnx::tensor_to_proto_bytes(t, "t"));
    CHECK(back.dtype() == dt);
    CHECK(back.shape() == t.shape());
    CHECK(back.to(DType::f64).to_vector<double>() == t.to(DType::f64).to_vector<double>());
  }
  ::onnx::TensorProto p;
  p.set_data_type(::onnx::TensorProto::FLOAT16);
  p.add_dims(2);
  p.add_int32_data(0x3C00);  // 1.0 and -2.0 as f16 bit patterns in int32_data
  p.add_int32_data(0xC000);
  CHECK(tonnx::tensor_from_proto_bytes(p.SerializeAsString()).to(DType::f32).to_vector<float>() == std::vector<float>{1, -2});
  p.add_int32_data(0);
  CHECK_THROWS_WITH(tonnx::tensor_from_proto_bytes(p.SerializeAsString()), doctest::Contains("holds 3 values, [2] needs 2"));
  ::onnx::TensorProto s;
  s.set_name("words");
  s.set_data_type(::onnx::TensorProto::STRING);
  CHECK_THROWS_AS(tonnx::tensor_from_proto_bytes(s.SerializeAsString()), tonnx::Unsupported);
  ::onnx::TensorProto ext;
  ext.set_name("big");
  ext.set_data_type(::onnx::TensorProto::FLOAT);
  ext.set_data_location(::onnx::TensorProto::EXTERNAL);
  CHECK_THROWS_WITH(tonnx::tensor_from_proto_bytes(ext.SerializeAsString()), doctest::Contains("tensor 'big' keeps its data in an external file"));
  CHECK_THROWS_WITH(tonnx::tensor_from_proto_bytes("not a proto"), doctest::Contains("is not a serialized TensorProto"));
}

TEST_CASE("a model loads through the ONNX checker and runs on every backend") {
  const tonnx::Model m = tonnx::Model::from_bytes(model_bytes("MatMul"));
  CHECK(m.input_names() == std::vector<std::string>{"x", "w"});
  CHECK(m.op_types() == std::vector<std::string>{"MatMul"});
  CHECK(m.opset() == 17);
  const Tensor x = from_vector<float>({1, 2, 3, 4}, {2, 2}), w = from_vector<float>({1, 0, 1, 1}, {2, 2});
  for (Device d : devices()) {
    CAPTURE(d.str());
    const std::vector<Tensor> y = m.run({x, w}, d);
    REQUIRE(y.size() == 1);
    CHECK(y[0].device() == d);
    CHECK(y[0].to(kCPU).to_vector<float>() == std::vector<float>{3, 2, 7, 4});
  }
  CHECK_THROWS_WITH(m.run({x}), doctest::Contains("the model takes 2 inputs, got 1"));
}

TEST_CASE("unsupported ops and attributes are named when the model loads, bad models fail the checker") {
  CHECK_THROWS_AS(tonnx::Model::from_bytes(model_bytes("SequenceConstruct")), tonnx::Unsupported);
  CHECK_THROWS_WITH(tonnx::Model::from_bytes(model_bytes("SequenceConstruct")),
                    doctest::Contains("onnx: op SequenceConstruct is not supported"));
  CHECK_THROWS_WITH(tonnx::Model::from_bytes(model_bytes("NoSuchOp")), doctest::Contains("fails the ONNX checker"));
  CHECK_THROWS_WITH(tonnx::Model::from_bytes("garbage", "m.onnx"), doctest::Contains("m.onnx is not a serialized ModelProto"));
  CHECK_THROWS_WITH(tonnx::Model::load("/nonexistent.onnx"), doctest::Contains("cannot open '/nonexistent.onnx'"));
  const std::vector<std::string> ops = tonnx::supported_ops();
  CHECK(std::find(ops.begin(), ops.end(), "Conv") != ops.end());
  CHECK(ops.size() > 100);
}

namespace {
// y = Dropout(x, ratio, training_mode) with both as initializers (ratio left out when < 0).
std::string dropout_model(double ratio, bool training) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* n = g->add_node();
  n->set_op_type("Dropout");
  n->set_name("drop1");
  n->add_input("x");
  n->add_input(ratio >= 0 ? "ratio" : "");
  n->add_input("training_mode");
  n->add_output("y");
  if (ratio >= 0) {
    auto* r = g->add_initializer();
    r->set_name("ratio");
    r->set_data_type(::onnx::TensorProto::FLOAT);
    r->add_float_data(static_cast<float>(ratio));
  }
  auto* t = g->add_initializer();
  t->set_name("training_mode");
  t->set_data_type(::onnx::TensorProto::BOOL);
  t->add_int32_data(training ? 1 : 0);
  for (const char* name : {"x", "y"}) {
    auto* v = std::string(name) == "x" ? g->add_input() : g->add_output();
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(::onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_value(4);
  }
  return m.SerializeAsString();
}
}  // namespace

TEST_CASE("Dropout in training mode: ratio 0 is the identity, any other ratio is refused when the model loads") {
  const Tensor x = from_vector<float>({1, 2, 3, 4}, {4});
  const tonnx::Model identity = tonnx::Model::from_bytes(dropout_model(0.0, true), "d.onnx");
  CHECK(identity.run({x}, kCPU)[0].to_vector<float>() == x.to_vector<float>());
  CHECK(tonnx::Model::from_bytes(dropout_model(0.3, false), "d.onnx").run({x}, kCPU)[0].to_vector<float>() == x.to_vector<float>());
  CHECK_THROWS_AS(tonnx::Model::from_bytes(dropout_model(0.3, true), "d.onnx"), tonnx::Unsupported);
  CHECK_THROWS_WITH(tonnx::Model::from_bytes(dropout_model(0.3, true), "d.onnx"),
                    doctest::Contains("d.onnx: Dropout node 'drop1' is in training mode (training_mode true, ratio 0.3"));
  CHECK_THROWS_WITH(tonnx::Model::from_bytes(dropout_model(-1, true), "d.onnx"), doctest::Contains("ratio 0.5"));  // the default
}

// A held-out probe: `tessera onnx run` on a FIFO hung, on /dev/zero it read 4.5 GB before
// bad_alloc, and a tiny model declaring a 4 TiB initializer failed only when allocating it.
TEST_CASE("model and tensor files must be regular files, and declared sizes must match the data before anything is allocated") {
  const std::string dir = std::filesystem::temp_directory_path() / ("tessera_onnx_probe_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string fifo = dir + "/model.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(tonnx::Model::load(fifo), doctest::Contains("is not a regular file (a FIFO): refused"));
  const std::string fifo_err = "tensor file '" + fifo + "' is not a regular file (a FIFO)";
  CHECK_THROWS_WITH(tonnx::load_tensor(fifo), doctest::Contains(fifo_err.c_str()));
  CHECK_THROWS_WITH(tonnx::Model::load(dir), doctest::Contains("(a directory): refused"));
  if (std::filesystem::exists("/dev/zero")) CHECK_THROWS_WITH(tonnx::Model::load("/dev/zero"), doctest::Contains("(a device): refused"));
  std::filesystem::remove_all(dir);
  // 4 TiB declared, 4 bytes held: refused by the size check, not by the allocator.
  ::onnx::TensorProto p;
  p.set_name("w");
  p.set_data_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : {int64_t{1} << 20, int64_t{1} << 20}) p.add_dims(d);
  p.set_raw_data(std::string(4, '\0'));
  CHECK_THROWS_WITH(tonnx::tensor_from_proto_bytes(p.SerializeAsString()), doctest::Contains("has 4 bytes of raw data, [1048576, 1048576] float32 needs 4398046511104"));
  p.clear_raw_data();
  p.add_float_data(1.0f);
  CHECK_THROWS_WITH(tonnx::tensor_from_proto_bytes(p.SerializeAsString()), doctest::Contains("holds 1 values"));
  p.clear_dims();
  for (int64_t d : {int64_t{1} << 40, int64_t{1} << 40}) p.add_dims(d);
  CHECK_THROWS_WITH(tonnx::tensor_from_proto_bytes(p.SerializeAsString()), doctest::Contains("has more than 2^63 elements"));
}

namespace {
// Module output and the re-imported model's output on `x`, on `device`.
std::pair<Tensor, Tensor> both(nn::Module& m, const Tensor& x, Device device) {
  const tonnx::Model model = tonnx::Model::from_bytes(tonnx::export_bytes(m, x.to(kCPU)));
  NoGradGuard no_grad;
  m.eval();
  const Tensor want = m.forward(x);
  return {want, model.run({x.to(kCPU)}, device)[0].to(want.device())};
}
struct Custom : nn::Module {
  Tensor forward(const Tensor& x) override { return x; }
  std::string name() const override { return "Custom"; }
};
}  // namespace

TEST_CASE("the CNN exports, passes the checker, and re-imports with the same predictions on every backend") {
  manual_seed(3);
  auto cnn = nn::make_cnn({});
  // Running statistics away from their initial 0 / 1, as after training.
  for (auto& [name, buf] : cnn->named_buffers()) {
    if (name.find("running_mean") != std::string::npos) buf.copy_(mul(rand(buf.shape()), 0.2));
    if (name.find("running_var") != std::string::npos) buf.copy_(add(rand(buf.shape()), 0.5));
  }
  const Tensor x = rand({4, 1, 28, 28});
  for (Device d : devices()) {
    CAPTURE(d.str());
    const auto [want, got] = both(*cnn, x, d);
    CHECK(got.shape() == Shape{4, 10});
    CHECK(argmax(got, 1).to_vector<int64_t>() == argmax(want, 1).to_vector<int64_t>());
    CHECK(amax(abs(sub(got, want))).item<float>() < 1e-4f);
  }
  // The batch axis is variable: the model exported with 4 images runs on 7.
  const tonnx::Model m = tonnx::Model::from_bytes(tonnx::export_bytes(*cnn, x));
  CHECK(m.run({rand({7, 1, 28, 28})})[0].shape() == Shape{7, 10});
  // To a file, atomically; a module without a mapping is named and nothing is written.
  const std::string path = "/tmp/tessera_onnx_test_" + std::to_string(::getpid()) + ".onnx";
  tonnx::export_model(*cnn, x, path);
  CHECK(tonnx::Model::load(path).op_types().size() >= 6);
  nn::Sequential bad;
  bad.add(std::make_shared<nn::ReLU>()).add(std::make_shared<Custom>());
  CHECK_THROWS_WITH(tonnx::export_model(bad, x, path + ".bad"), doctest::Contains("module Custom has no ONNX mapping"));
  CHECK_FALSE(std::filesystem::exists(path + ".bad"));
  std::filesystem::remove(path);
}

TEST_CASE("every standard layer exports: pools, norms, activations, dropout, linear on 3-D input") {
  manual_seed(4);
  nn::Sequential net;
  net.add(std::make_shared<nn::Conv2d>(3, 8, Size2{3, 3}, Size2{2, 2}, Size2{1, 1}))
      .add(std::make_shared<nn::AvgPool2d>(Size2{3, 3}, Size2{1, 1}, Size2{1, 1}, false, false))
      .add(std::make_shared<nn::SiLU>())
      .add(std::make_shared<nn::AdaptiveAvgPool2d>(Size2{2, 2}))
      .add(std::make_shared<nn::Flatten>(2))  // [N, 8, 4]
      .add(std::make_shared<nn::Linear>(4, 6))
      .add(std::make_shared<nn::GELU>())
      .add(std::make_shared<nn::LayerNorm>(Shape{6}))
      .add(std::make_shared<nn::GELU>(true))
      .add(std::make_shared<nn::Dropout>(0.3))
      .add(std::make_shared<nn::Tanh>())
      .add(std::make_shared<nn::Flatten>())
      .add(std::make_shared<nn::Linear>(48, 5))
      .add(std::make_shared<nn::Sigmoid>());
  const Tensor x = rand({2, 3, 8, 8});
  for (Device d : devices()) {
    CAPTURE(d.str());
    const auto [want, got] = both(net, x, d);
    REQUIRE(got.shape() == want.shape());
    CHECK(amax(abs(sub(got, want))).item<float>() < 1e-5f);
  }
}

TEST_CASE("pools with ceil_mode and dilation export and re-import; a window PyTorch drops is refused at export") {
  manual_seed(6);
  nn::Sequential net;
  net.add(std::make_shared<nn::Conv2d>(3, 4, Size2{3, 3}, Size2{1, 1}, Size2{1, 1}))  // 9x9
      .add(std::make_shared<nn::MaxPool2d>(Size2{2, 2}, Size2{1, 1}, Size2{0, 0}, Size2{2, 2}))  // 7x7
      .add(std::make_shared<nn::MaxPool2d>(Size2{3, 3}, Size2{2, 2}, Size2{1, 1}, Size2{1, 1}, true))  // 4x4
      .add(std::make_shared<nn::AvgPool2d>(Size2{3, 3}, Size2{2, 2}, Size2{0, 0}, true, false));  // 2x2, the last window partial
  const Tensor x = rand({2, 3, 9, 9});
  for (Device d : devices()) {
    CAPTURE(d.str());
    const auto [want, got] = both(net, x, d);
    REQUIRE(got.shape() == Shape{2, 4, 2, 2});
    CHECK(amax(abs(sub(got, want))).item<float>() < 1e-5f);
  }
  // 4 wide, kernel 2, stride 3, padding 1: the third window would start at 6, past 4 + 1.
  nn::MaxPool2d drops(Size2{2, 2}, Size2{3, 3}, Size2{1, 1}, Size2{1, 1}, true);
  CHECK(drops.forward(rand({1, 1, 4, 4})).shape() == Shape{1, 1, 2, 2});
  CHECK_THROWS_WITH(tonnx::export_bytes(drops, rand({1, 1, 4, 4})), doctest::Contains("MaxPool2d with ceil_mode on input [1, 1, 4, 4]"));
}

TEST_CASE("the GPT exports with variable batch and sequence and re-imports to the same logits on every backend") {
  manual_seed(5);
  nn::GPTConfig c;
  c.vocab = 23;
  c.context = 16;
  c.layers = 2;
  c.heads = 2;
  c.dim = 16;
  nn::GPT gpt(c);
  const Tensor example = randint(0, c.vocab, {2, 5}, DType::i64);
  const tonnx::Model model = tonnx::Model::from_bytes(tonnx::export_bytes(gpt, example));
  NoGradGuard no_grad;
  gpt.eval();
  // Other batch sizes and lengths than the example's, up to the whole context.
  for (const Shape& s : {Shape{2, 5}, Shape{3, 16}, Shape{1, 1}}) {
    const Tensor tokens = randint(0, c.vocab, s, DType::i64);
    const Tensor want = gpt.forward(tokens);
    for (Device d : devices()) {
      CAPTURE(d.str());
      CAPTURE(shape_str(s));
      const Tensor got = model.run({tokens}, d)[0].to(kCPU);
      REQUIRE(got.shape() == Shape{s[0], s[1], c.vocab});
      CHECK(argmax(got, 2).to_vector<int64_t>() == argmax(want, 2).to_vector<int64_t>());
      CHECK(amax(abs(sub(got, want))).item<float>() < 1e-4f);
    }
  }
  // Longer than the context: the position table has no row for it, and the error says so.
  CHECK_THROWS(model.run({randint(0, c.vocab, {1, 17}, DType::i64)}));
}

TEST_CASE("nn::LSTM and nn::GRU export (gates reordered, both biases kept) and re-import to the same outputs, any length and batch") {
  manual_seed(7);
  struct Case {
    bool lstm;
    nn::RecurrentOptions o;
  };
  for (const Case& c :
       {Case{true, {2, false, true}}, Case{true, {1, true, false}}, Case{false, {2, true, true}}, Case{false, {1, false, false}}}) {
    CAPTURE(c.lstm);
    CAPTURE(c.o.num_layers);
    CAPTURE(c.o.batch_first);
    CAPTURE(c.o.bias);
    std::shared_ptr<nn::Module> cell;
    if (c.lstm) cell = std::make_shared<nn::LSTM>(5, 6, c.o);
    else cell = std::make_shared<nn::GRU>(5, 6, c.o);
    nn::Sequential net;
    net.add(cell).add(std::make_shared<nn::Linear>(6, 3));
    const tonnx::Model model = tonnx::Model::from_bytes(tonnx::export_bytes(net, rand({4, 3, 5})));
    const auto ops = model.op_types();
    CHECK(std::count(ops.begin(), ops.end(), c.lstm ? "LSTM" : "GRU") == 1);
    NoGradGuard no_grad;
    // Both leading axes are variable: other lengths and batch sizes than the example's.
    for (const Shape& s : {Shape{4, 3, 5}, Shape{9, 2, 5}, Shape{1, 1, 5}}) {
      CAPTURE(shape_str(s));
      const Tensor x = rand(s), want = net.forward(x);
      for (Device d : devices()) {
        CAPTURE(d.str());
        const Tensor got = model.run({x}, d)[0].to(kCPU);
        REQUIRE(got.shape() == want.shape());
        CHECK(amax(abs(sub(got, want))).item<float>() < 1e-5f);
      }
    }
  }
}
