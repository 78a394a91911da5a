#pragma once
// Internals of the ONNX exporter: a graph builder (fresh value names, initializers, nodes) and
// the emitters shared by the layer exporter (export.cpp) and the transformer's (export_gpt.cpp).
#include <string>
#include <vector>

#include "proto.h"
#include "tessera/nn/language_model.h"
#include "tessera/nn/layers.h"

namespace tessera::onnx::export_detail {

class Builder {
 public:
  explicit Builder(::onnx::GraphProto& g) : g_(g) {}
  std::string fresh(const std::string& stem) { return stem + "_" + std::to_string(counter_++); }
  std::string initializer(const std::string& stem, const Tensor& t) {
    const std::string name = fresh(stem);
    tensor_to_proto(t, name, *g_.add_initializer());
    return name;
  }
  ::onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs) {
    auto* n = g_.add_node();
    n->set_op_type(op);
    n->set_name(fresh(op));
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return *n;
  }
  ::onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs, const std::string& output) {
    return node(op, inputs, std::vector<std::string>{output});
  }
  std::string apply(const std::string& op, const std::vector<std::string>& inputs) {
    const std::string out = fresh(op + "_out");
    node(op, inputs, out);
    return out;
  }
  std::string scalar(double v, DType dt) { return initializer("c", full({}, v, dt)); }
  std::string ints(const std::vector<int64_t>& v) { return initializer("i", from_vector(v, {static_cast<int64_t>(v.size())})); }

 private:
  ::onnx::GraphProto& g_;
  int counter_ = 0;
};

inline void attr(::onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}
inline void attr(::onnx::NodeProto& n, const std::string& name, double v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(static_cast<float>(v));
}
inline void attr(::onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
inline Tensor host(const Tensor& t) { return t.detach().to(kCPU).contiguous(); }

/** x @ W^T + b: Gemm for 2-D inputs, MatMul + Add otherwise. */
std::string emit_linear(Builder& b, const nn::Linear& l, const std::string& x, int64_t rank);
std::string emit_layer_norm(Builder& b, const nn::LayerNorm& ln, const std::string& x, DType dt);
/** opset 17 has no Gelu: the erf form, or the tanh approximation. */
std::string emit_gelu(Builder& b, const std::string& x, bool tanh_approximation, DType dt);
/** The GPT on int64 tokens [batch, sequence] -> logits [batch, sequence, vocab]. */
std::string emit_gpt(Builder& b, const nn::GPT& gpt, const std::string& tokens);
/** nn::LSTM / nn::GRU as one ONNX node per layer; empty when `m` is neither. */
std::string emit_recurrent(Builder& b, nn::Module& m, const std::string& x);
/** The variable leading axes of a model whose first layer is recurrent ({"sequence", "batch"}
 *  or, batch first, {"batch", "sequence"}); empty otherwise. */
std::vector<std::string> recurrent_variable_axes(const nn::Module& m);

}  // namespace tessera::onnx::export_detail
