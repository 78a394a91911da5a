#pragma once
// Internals of the ONNX importer: protobuf conversions and the op table every mapped ONNX
// op registers in (ops_*.cpp). A handler gets its node's inputs (undefined for an absent
// optional input) and typed attribute readers, and returns the node's outputs.
#include <onnx/onnx_pb.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/onnx.h"
#include "tessera/tessera.h"

namespace tessera::onnx {

DType dtype_from_onnx(int onnx_type, const std::string& what);
int dtype_to_onnx(DType dt);
Tensor tensor_from_proto(const ::onnx::TensorProto& p);
void tensor_to_proto(const Tensor& t, const std::string& name, ::onnx::TensorProto& p);
/** The bytes of a model or tensor file; refuses anything but a regular file of at most 2 GiB
 *  ("onnx: <what> '<path>' is not a regular file (a FIFO): refused"). */
std::string read_model_file(const std::string& path, const char* what);

/** The values a graph has produced so far, by name (a subgraph sees its enclosing graphs'). */
using Scope = std::map<std::string, Tensor>;

/** What a handler sees of its node. */
class Ctx {
 public:
  Ctx(const ::onnx::NodeProto& node, int64_t opset, Device device, std::vector<Tensor> inputs, const Scope* scope = nullptr)
      : node_(node), opset_(opset), device_(device), in_(std::move(inputs)), scope_(scope) {}
  const ::onnx::NodeProto& node() const { return node_; }
  int64_t opset() const { return opset_; }
  Device device() const { return device_; }
  size_t num_inputs() const { return in_.size(); }
  bool has(size_t i) const { return i < in_.size() && in_[i].defined(); }
  const Tensor& in(size_t i) const;
  /** An input read on the host as integers (shapes, axes, pads given as tensors). */
  std::vector<int64_t> ints(size_t i) const;
  /** A 0-d or 1-element input read on the host. */
  double scalar(size_t i) const;

  bool has_attr(const std::string& name) const { return find(name) != nullptr; }
  int64_t attr_i(const std::string& name, int64_t fallback) const;
  double attr_f(const std::string& name, double fallback) const;
  std::string attr_s(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> fallback = {}) const;
  std::vector<double> attr_floats(const std::string& name) const;
  Tensor attr_t(const std::string& name) const;
  /** A graph attribute (Loop's body, If's branches). */
  const ::onnx::GraphProto& attr_g(const std::string& name) const;
  /** The values visible at this node (for the subgraphs of Loop and If). */
  const Scope& scope() const;

 private:
  const ::onnx::AttributeProto* find(const std::string& name) const;
  const ::onnx::NodeProto& node_;
  int64_t opset_;
  Device device_;
  std::vector<Tensor> in_;
  const Scope* scope_;
};

struct OpDef {
  std::function<std::vector<Tensor>(const Ctx&)> run;
  /** Load-time check of attributes and constant settings; throws Unsupported. May be empty. */
  std::function<void(const ::onnx::NodeProto&, int64_t opset)> check;
};
/** Keyed by op type, prefixed by the domain outside the default one
 *  ("ai.onnx.preview.training.Adam"): op_key(node). */
using OpTable = std::map<std::string, OpDef>;
const OpTable& op_table();
std::string op_key(const ::onnx::NodeProto& node);

/** Runs `graph`'s nodes in order over `values` (its inputs and the enclosing scope), adding
 *  every value they produce. */
void run_nodes(const ::onnx::GraphProto& graph, Scope& values, Device device, int64_t opset);
/** Runs a subgraph (a Loop body, an If branch): its inputs bound to `inputs`, its initializers
 *  and the enclosing `outer` scope visible; returns its outputs in order. */
std::vector<Tensor> run_subgraph(const ::onnx::GraphProto& graph, const std::vector<Tensor>& inputs, const Scope& outer, Device device,
                                 int64_t opset);

void register_elementwise_ops(OpTable& t);
void register_tensor_ops(OpTable& t);
void register_nn_ops(OpTable& t);
void register_conv_loss_ops(OpTable& t);
void register_resize_ops(OpTable& t);
void register_data_dependent_ops(OpTable& t);
void register_recurrent_ops(OpTable& t);
void register_training_signal_ops(OpTable& t);
void register_control_flow_ops(OpTable& t);
void register_quantized_ops(OpTable& t);
void register_tfidf_roialign_ops(OpTable& t);

/** Conv's computation (ops_nn.cpp) for the node behind `c`: X, W, optional B and Conv's
 *  attributes (ConvInteger and QLinearConv share them). */
Tensor conv_node(const Ctx& c);

/** A tensor's values on the host as doubles (any device, dtype and layout). */
std::vector<double> host_doubles(const Tensor& t);
/** An attribute's value as a readable string, for error messages. */
std::string attr_text(const ::onnx::NodeProto& node, const std::string& name);
/** Throws Unsupported when `node` has attribute `name` with an int value other than `allowed`. */
void require_attr_i(const ::onnx::NodeProto& node, const std::string& name, int64_t allowed);
/** Throws Unsupported naming the node's op and what is missing. */
[[noreturn]] void unsupported(const ::onnx::NodeProto& node, const std::string& what);

/** ONNX axis (negative counts from the end) for a rank-`rank` tensor. */
int64_t axis_of(int64_t axis, int64_t rank, const ::onnx::NodeProto& node);

}  // namespace tessera::onnx
