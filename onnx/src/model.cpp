// Model loading (parse, ONNX checker, load-time mapping of every node) and the interpreter
// that runs the graph node by node (ONNX graphs are stored in topological order).
#include <onnx/checker.h>

#include <fstream>
#include <set>
#include <sstream>

#include "proto.h"

namespace tessera::onnx {

// ---- Ctx ----
const Tensor& Ctx::in(size_t i) const {
  if (!has(i)) throw Error(detail::concat("onnx: ", node_.op_type(), " node '", node_.name(), "' lacks its input ", i));
  return in_[i];
}
std::vector<double> host_doubles(const Tensor& t) { return t.to(kCPU).to(DType::f64).contiguous().to_vector<double>(); }
std::vector<int64_t> Ctx::ints(size_t i) const { return in(i).to(kCPU).to(DType::i64).contiguous().to_vector<int64_t>(); }
double Ctx::scalar(size_t i) const {
  const Tensor t = in(i);
  TESSERA_CHECK(t.numel() == 1, "onnx", node_.op_type(), " input ", i, " must hold one value, got ", shape_str(t.shape()));
  return t.to(kCPU).to(DType::f64).reshape({}).item<double>();
}
const ::onnx::AttributeProto* Ctx::find(const std::string& name) const {
  for (const auto& a : node_.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}
int64_t Ctx::attr_i(const std::string& name, int64_t fallback) const {
  const auto* a = find(name);
  return a ? a->i() : fallback;
}
double Ctx::attr_f(const std::string& name, double fallback) const {
  const auto* a = find(name);
  return a ? a->f() : fallback;
}
std::string Ctx::attr_s(const std::string& name, const std::string& fallback) const {
  const auto* a = find(name);
  return a ? a->s() : fallback;
}
std::vector<int64_t> Ctx::attr_ints(const std::string& name, std::vector<int64_t> fallback) const {
  const auto* a = find(name);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : fallback;
}
std::vector<double> Ctx::attr_floats(const std::string& name) const {
  const auto* a = find(name);
  return a ? std::vector<double>(a->floats().begin(), a->floats().end()) : std::vector<double>{};
}
Tensor Ctx::attr_t(const std::string& name) const {
  const auto* a = find(name);
  TESSERA_CHECK(a && a->has_t(), "onnx", node_.op_type(), " needs tensor attribute '", name, "'");
  return tensor_from_proto(a->t());
}

const ::onnx::GraphProto& Ctx::attr_g(const std::string& name) const {
  const auto* a = find(name);
  TESSERA_CHECK(a && a->has_g(), "onnx", node_.op_type(), " needs graph attribute '", name, "'");
  return a->g();
}
const Scope& Ctx::scope() const {
  TESSERA_CHECK(scope_ != nullptr, "onnx", node_.op_type(), " runs without a scope");
  return *scope_;
}

std::string op_key(const ::onnx::NodeProto& node) {
  return node.domain().empty() || node.domain() == "ai.onnx" ? node.op_type() : node.domain() + "." + node.op_type();
}

std::string attr_text(const ::onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute()) {
    if (a.name() != name) continue;
    if (a.has_i()) return std::to_string(a.i());
    if (a.has_f()) return std::to_string(a.f());
    if (a.has_s()) return "\"" + a.s() + "\"";
    return "(set)";
  }
  return "(unset)";
}
void unsupported(const ::onnx::NodeProto& node, const std::string& what) {
  throw Unsupported(detail::concat("onnx: ", node.op_type(), " ", what, " is not supported"));
}
void require_attr_i(const ::onnx::NodeProto& node, const std::string& name, int64_t allowed) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name && a.i() != allowed) unsupported(node, name + "=" + std::to_string(a.i()));
  }
}
int64_t axis_of(int64_t axis, int64_t rank, const ::onnx::NodeProto& node) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  TESSERA_CHECK(a >= 0 && a < std::max<int64_t>(rank, 1), "onnx", node.op_type(), ": axis ", axis, " out of range for rank ", rank);
  return a;
}

const OpTable& op_table() {
  static const OpTable table = [] {
    OpTable t;
    register_elementwise_ops(t);
    register_tensor_ops(t);
    register_nn_ops(t);
    register_conv_loss_ops(t);
    register_resize_ops(t);
    register_data_dependent_ops(t);
    register_recurrent_ops(t);
    register_training_signal_ops(t);
    register_control_flow_ops(t);
    register_quantized_ops(t);
    register_tfidf_roialign_ops(t);
    return t;
  }();
  return table;
}

std::vector<std::string> supported_ops() {
  std::vector<std::string> out;
  for (const auto& [name, def] : op_table()) out.push_back(name);
  return out;
}

// ---- Model ----
struct Model::Impl {
  ::onnx::ModelProto proto;
  int64_t opset = 0;
  std::map<std::string, Tensor> initializers;  // on the CPU; moved to the run's device
  std::vector<std::string> inputs, outputs;
};

namespace {
// A Dropout whose training_mode is a constant true and whose ratio is not a constant 0 would
// drop at random: refused at load time, naming the node (it used to fail in the middle of a run).
void refuse_training_dropout(const ::onnx::GraphProto& g, const std::map<std::string, Tensor>& initializers, const std::string& model) {
  std::map<std::string, Tensor> constants = initializers;
  for (const auto& node : g.node()) {
    if (node.op_type() != "Constant" || node.output_size() != 1) continue;
    for (const auto& a : node.attribute()) {
      if (a.name() == "value" && a.has_t()) constants[node.output(0)] = tensor_from_proto(a.t());
    }
  }
  const auto constant = [&](const ::onnx::NodeProto& node, int i) -> const Tensor* {
    if (node.input_size() <= i || node.input(i).empty()) return nullptr;
    const auto it = constants.find(node.input(i));
    return it == constants.end() || it->second.numel() != 1 ? nullptr : &it->second;
  };
  for (const auto& node : g.node()) {
    if (node.op_type() != "Dropout") continue;
    const Tensor* training = constant(node, 2);
    if (!training || training->to(DType::f64).item<double>() == 0) continue;
    const bool has_ratio = node.input_size() > 1 && !node.input(1).empty();
    const Tensor* ratio = constant(node, 1);
    const double r = !has_ratio ? 0.5 : ratio ? ratio->to(DType::f64).item<double>() : -1;
    if (r == 0) continue;  // the identity
    throw Unsupported(detail::concat("onnx: ", model, ": Dropout node '", node.name(), "' is in training mode (training_mode true, ratio ",
                                     r < 0 ? std::string("not a constant") : std::to_string(r), "), which is not supported"));
  }
}

void check_value_type(const ::onnx::ValueInfoProto& v, const char* role) {
  if (!v.has_type()) return;
  const auto& t = v.type();
  if (!t.has_tensor_type()) {
    throw Unsupported(detail::concat("onnx: ", role, " '", v.name(), "' is not a tensor (sequence, map or optional values are not supported)"));
  }
  dtype_from_onnx(t.tensor_type().elem_type(), detail::concat(role, " '", v.name(), "'"));
}

// Every node maps to a handler whose load-time check passes, subgraphs (Loop, If) included.
void check_nodes(const ::onnx::GraphProto& g, int64_t opset) {
  const OpTable& table = op_table();
  for (const auto& node : g.node()) {
    const auto it = table.find(op_key(node));
    if (it == table.end()) {
      const bool domain = !node.domain().empty() && node.domain() != "ai.onnx";
      throw Unsupported(detail::concat("onnx: op ", domain ? node.domain() + "." : std::string(), node.op_type(), " is not supported"));
    }
    if (it->second.check) it->second.check(node, opset);
    for (const auto& a : node.attribute()) {
      if (a.has_g()) check_nodes(a.g(), opset);
      for (const auto& sub : a.graphs()) check_nodes(sub, opset);
    }
  }
}
}  // namespace

void run_nodes(const ::onnx::GraphProto& graph, Scope& values, Device device, int64_t opset) {
  const OpTable& table = op_table();
  for (const auto& node : graph.node()) {
    std::vector<Tensor> in;
    for (const std::string& name : node.input()) {
      if (name.empty()) {
        in.emplace_back();
        continue;
      }
      const auto v = values.find(name);
      TESSERA_CHECK(v != values.end(), "onnx", node.op_type(), " node '", node.name(), "' reads '", name, "', which nothing produced");
      in.push_back(v->second);
    }
    std::vector<Tensor> out;
    try {
      out = table.at(op_key(node)).run(Ctx(node, opset, device, std::move(in), &values));
    } catch (const Unsupported&) {
      throw;
    } catch (const Error& e) {
      throw Error(detail::concat("onnx: ", node.op_type(), " node '", node.name(), "': ", e.what()));
    }
    for (int i = 0; i < node.output_size() && i < static_cast<int>(out.size()); ++i) {
      if (!node.output(i).empty()) values[node.output(i)] = out[static_cast<size_t>(i)];
    }
  }
}

std::vector<Tensor> run_subgraph(const ::onnx::GraphProto& graph, const std::vector<Tensor>& inputs, const Scope& outer, Device device,
                                 int64_t opset) {
  TESSERA_CHECK(static_cast<size_t>(graph.input_size()) == inputs.size(), "onnx", "subgraph '", graph.name(), "' takes ",
                graph.input_size(), " inputs, got ", inputs.size());
  Scope values = outer;
  for (const auto& init : graph.initializer()) values[init.name()] = tensor_from_proto(init).to(device);
  for (size_t i = 0; i < inputs.size(); ++i) values[graph.input(static_cast<int>(i)).name()] = inputs[i];
  run_nodes(graph, values, device, opset);
  std::vector<Tensor> result;
  for (const auto& out : graph.output()) {
    const auto v = values.find(out.name());
    TESSERA_CHECK(v != values.end(), "onnx", "subgraph '", graph.name(), "' never produced its output '", out.name(), "'");
    result.push_back(v->second);
  }
  return result;
}

Model Model::from_bytes(const std::string& bytes, const std::string& name) {
  auto impl = std::make_unique<Impl>();
  TESSERA_CHECK(impl->proto.ParseFromString(bytes), "onnx", name, " is not a serialized ModelProto");
  try {
    ::onnx::checker::check_model(impl->proto);
  } catch (const std::exception& e) {
    throw Error(detail::concat("onnx: ", name, " fails the ONNX checker: ", e.what()));
  }
  for (const auto& o : impl->proto.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") impl->opset = o.version();
  }
  const auto& g = impl->proto.graph();
  for (const auto& init : g.initializer()) impl->initializers[init.name()] = tensor_from_proto(init);
  TESSERA_CHECK(g.sparse_initializer_size() == 0, "onnx", name, " has sparse initializers, which are not supported");
  for (const auto& in : g.input()) {
    if (impl->initializers.count(in.name())) continue;
    check_value_type(in, "input");
    impl->inputs.push_back(in.name());
  }
  for (const auto& out : g.output()) {
    check_value_type(out, "output");
    impl->outputs.push_back(out.name());
  }
  refuse_training_dropout(g, impl->initializers, name);
  check_nodes(g, impl->opset);
  return Model(std::move(impl));
}

Model Model::load(const std::string& path) { return from_bytes(read_model_file(path, "model"), "'" + path + "'"); }

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
const std::vector<std::string>& Model::input_names() const { return impl_->inputs; }
const std::vector<std::string>& Model::output_names() const { return impl_->outputs; }
int64_t Model::opset() const { return impl_->opset; }
std::vector<std::string> Model::op_types() const {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& n : impl_->proto.graph().node()) {
    if (seen.insert(n.op_type()).second) out.push_back(n.op_type());
  }
  return out;
}

std::vector<Tensor> Model::run(const std::vector<Tensor>& inputs, Device device) const {
  TESSERA_CHECK(inputs.size() == impl_->inputs.size(), "onnx", "the model takes ", impl_->inputs.size(), " inputs, got ", inputs.size());
  NoGradGuard no_grad;
  Scope values;
  for (const auto& [name, t] : impl_->initializers) values[name] = t.to(device);
  for (size_t i = 0; i < inputs.size(); ++i) values[impl_->inputs[i]] = inputs[i].to(device);
  run_nodes(impl_->proto.graph(), values, device, impl_->opset);
  std::vector<Tensor> result;
  for (const std::string& name : impl_->outputs) {
    const auto v = values.find(name);
    TESSERA_CHECK(v != values.end(), "onnx", "output '", name, "' was never produced");
    result.push_back(v->second);
  }
  return result;
}

}  // namespace tessera::onnx
