// The ONNX importer's own contract: TensorProto round trips for every Tessera dtype (raw and
// typed fields), clear errors for what it cannot read, unsupported ops named at load time,
// and a small hand-built graph run on every backend in the build.
#include <onnx/onnx_pb.h>

#include <doctest/doctest.h>

#include "tessera/backend/registry.h"
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
  CHECK_THROWS_AS(tonnx::Model::from_bytes(model_bytes("MatMulInteger")), tonnx::Unsupported);
  CHECK_THROWS_WITH(tonnx::Model::from_bytes(model_bytes("MatMulInteger")), doctest::Contains("onnx: op MatMulInteger is not supported"));
  CHECK_THROWS_WITH(tonnx::Model::from_bytes(model_bytes("NoSuchOp")), doctest::Contains("fails the ONNX checker"));
  CHECK_THROWS_WITH(tonnx::Model::from_bytes("garbage", "m.onnx"), doctest::Contains("m.onnx is not a serialized ModelProto"));
  CHECK_THROWS_WITH(tonnx::Model::load("/nonexistent.onnx"), doctest::Contains("cannot open '/nonexistent.onnx'"));
  const std::vector<std::string> ops = tonnx::supported_ops();
  CHECK(std::find(ops.begin(), ops.end(), "Conv") != ops.end());
  CHECK(ops.size() > 100);
}
