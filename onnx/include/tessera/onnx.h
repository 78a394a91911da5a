#pragma once
// ONNX import: a ModelProto (file or bytes) checked by the ONNX checker and turned into a graph
// of Tessera ops that runs on any backend. Every node's op, attributes and dtypes are checked
// when the model loads: what Tessera cannot run is named then (tessera::onnx::Unsupported),
// never half-way through a run. Protobuf types stay out of this header.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::nn {
class Module;
}

namespace tessera::onnx {

/** A model (or tensor) uses an op, attribute value or dtype Tessera does not map. */
class Unsupported : public Error {
 public:
  using Error::Error;
};

/** A TensorProto's bytes (a .pb file of the ONNX test suite) as a CPU tensor. */
Tensor tensor_from_proto_bytes(const std::string& bytes, const std::string& name = "tensor");
/** Reads a serialized TensorProto file. */
Tensor load_tensor(const std::string& path);
/** A TensorProto of `t` (raw_data, little-endian), serialized. */
std::string tensor_to_proto_bytes(const Tensor& t, const std::string& name = "");

class Model {
 public:
  /** Parses, runs the ONNX checker, and maps every node (throws Unsupported naming the first). */
  static Model load(const std::string& path);
  static Model from_bytes(const std::string& bytes, const std::string& name = "model");
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  /** The graph's inputs that are not initializers, in order; and its outputs. */
  const std::vector<std::string>& input_names() const;
  const std::vector<std::string>& output_names() const;
  /** The ops the graph uses, each once, in first-use order. */
  std::vector<std::string> op_types() const;
  int64_t opset() const;

  /** Runs the graph on `device` (inputs are moved there); outputs in output_names() order. */
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, Device device = kCPU) const;

  struct Impl;

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/**
 * Exports `module` (Sequential and nn's standard layers: Linear, Conv2d, pools, BatchNorm,
 * LayerNorm, activations, Flatten, Embedding, Dropout as Identity) and nn::GPT, traced in eval
 * mode on `example_input`, as an opset-17 model whose batch axis is variable (for the GPT, int64
 * tokens [batch, sequence] -> logits [batch, sequence, vocab], the sequence variable up to the context). The model passes the
 * ONNX checker before the file is written (atomically). A module without a mapping throws
 * Unsupported naming it.
 */
void export_model(nn::Module& module, const Tensor& example_input, const std::string& path);
std::string export_bytes(nn::Module& module, const Tensor& example_input);

/** The ops this importer maps (ONNX op_type names). */
std::vector<std::string> supported_ops();

/** One case of the ONNX node-test layout: DIR/model.onnx and DIR/test_data_set_N/{input,output}_K.pb. */
struct CaseResult {
  std::string name;
  enum Status { passed, failed, skipped } status = skipped;
  std::string detail;  ///< failed: what differed or the error; skipped: the unsupported op or dtype
};
/** Runs every data set of the case in `dir` on `device`; rtol 1e-3, atol 1e-7 as ONNX's runner. */
CaseResult run_node_case(const std::string& dir, Device device);

}  // namespace tessera::onnx
