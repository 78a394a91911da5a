// Export of nn modules to ONNX: the layers of nn (Sequential and the standard layers) become
// nodes with their parameters as initializers. The model is traced once on the example input
// (in eval mode) so every node knows its shapes; the file passes the ONNX checker before it is
// written, atomically.
#include <onnx/checker.h>

#include <cmath>

#include "export_builder.h"
#include "tessera/nn/file_io.h"
#include "tessera/nn/layers.h"

namespace tessera::onnx {

namespace export_detail {
std::string emit_linear(Builder& b, const nn::Linear& l, const std::string& x, int64_t rank) {
  const std::string w = b.initializer("weight", host(l.weight));
  std::vector<std::string> in = {x, w};
  if (l.bias.defined()) in.push_back(b.initializer("bias", host(l.bias)));
  if (rank == 2) {
    const std::string out = b.fresh("linear_out");
    attr(b.node("Gemm", in, out), "transB", int64_t{1});
    return out;
  }
  const std::string y = b.apply("MatMul", {x, b.apply("Transpose", {w})});
  return l.bias.defined() ? b.apply("Add", {y, in[2]}) : y;
}

std::string emit_layer_norm(Builder& b, const nn::LayerNorm& ln, const std::string& x, DType dt) {
  const Shape& s = ln.normalized_shape();
  const std::string out = b.fresh("ln_out");
  auto& n = b.node("LayerNormalization",
                   {x, b.initializer("scale", ln.weight.defined() ? host(ln.weight) : ones(s, dt)),
                    b.initializer("shift", ln.bias.defined() ? host(ln.bias) : zeros(s, dt))},
                   out);
  attr(n, "axis", -static_cast<int64_t>(s.size()));
  attr(n, "epsilon", ln.eps());
  return out;
}

std::string emit_gelu(Builder& b, const std::string& x, bool tanh_approximation, DType dt) {
  const std::string half_x = b.apply("Mul", {x, b.scalar(0.5, dt)});
  std::string inner;
  if (tanh_approximation) {
    const std::string cube = b.apply("Mul", {b.apply("Mul", {x, x}), x});
    const std::string sum = b.apply("Add", {x, b.apply("Mul", {cube, b.scalar(0.044715, dt)})});
    inner = b.apply("Tanh", {b.apply("Mul", {sum, b.scalar(std::sqrt(2.0 / M_PI), dt)})});
  } else {
    inner = b.apply("Erf", {b.apply("Mul", {x, b.scalar(M_SQRT1_2, dt)})});
  }
  return b.apply("Mul", {half_x, b.apply("Add", {inner, b.scalar(1.0, dt)})});
}
}  // namespace export_detail

namespace {
using namespace export_detail;

std::vector<int64_t> v2(Size2 s) { return {s[0], s[1]}; }
std::vector<int64_t> pads2(Size2 p) { return {p[0], p[1], p[0], p[1]}; }

// ONNX's ceil_mode rounds the output size up, but PyTorch's (and Tessera's) also drops a last
// window that would start in the right padding; where the two disagree for the traced input the
// file would compute another shape, so the export refuses it.
void check_ceil_mode_sizes(const char* layer, bool ceil_mode, const Tensor& xt, const Tensor& yt, Size2 k, Size2 s, Size2 p, Size2 d) {
  if (!ceil_mode) return;
  for (int i = 0; i < 2; ++i) {
    const int64_t span = xt.size(2 + i) + 2 * p[i] - (k[i] - 1) * d[i] - 1, onnx_size = (span + s[i] - 1) / s[i] + 1;
    if (yt.size(2 + i) != onnx_size)
      throw Unsupported(detail::concat("onnx export: ", layer, " with ceil_mode on input ", shape_str(xt.shape()),
                                       ": its last window would start in the padding, which ONNX's ceil_mode keeps (", onnx_size,
                                       " outputs) and PyTorch's drops (", yt.size(2 + i), ")"));
  }
}

// Emits `m` applied to value `x` (whose traced tensor is `xt`); returns the output value and
// sets `yt` to the traced output.
std::string emit(Builder& b, nn::Module& m, const std::string& x, const Tensor& xt, Tensor& yt) {
  const std::string kind = m.name();
  if (kind == "Sequential") {
    std::string v = x;
    Tensor t = xt;
    for (const auto& [name, child] : m.children()) {
      Tensor next;
      v = emit(b, *child, v, t, next);
      t = next;
    }
    yt = t;
    return v;
  }
  yt = m.forward(xt);
  if (auto* gpt = dynamic_cast<nn::GPT*>(&m)) return emit_gpt(b, *gpt, x);
  if (std::string y = emit_recurrent(b, m, x); !y.empty()) return y;
  const DType dt = xt.dtype();
  if (auto* l = dynamic_cast<nn::Linear*>(&m)) return emit_linear(b, *l, x, xt.dim());
  if (auto* c = dynamic_cast<nn::Conv2d*>(&m)) {
    std::vector<std::string> in = {x, b.initializer("weight", host(c->weight))};
    if (c->bias.defined()) in.push_back(b.initializer("bias", host(c->bias)));
    const std::string out = b.fresh("conv_out");
    auto& n = b.node("Conv", in, out);
    attr(n, "kernel_shape", std::vector<int64_t>{c->weight.size(2), c->weight.size(3)});
    attr(n, "strides", v2(c->stride));
    attr(n, "pads", pads2(c->padding));
    attr(n, "dilations", v2(c->dilation));
    attr(n, "group", c->groups);
    return out;
  }
  if (auto* p = dynamic_cast<nn::MaxPool2d*>(&m)) {
    const std::string out = b.fresh("maxpool_out");
    auto& n = b.node("MaxPool", {x}, out);
    attr(n, "kernel_shape", v2(p->kernel()));
    attr(n, "strides", v2(p->stride()));
    attr(n, "pads", pads2(p->padding()));
    if (p->dilation() != Size2{1, 1}) attr(n, "dilations", v2(p->dilation()));
    if (p->ceil_mode()) attr(n, "ceil_mode", int64_t{1});
    check_ceil_mode_sizes("MaxPool2d", p->ceil_mode(), xt, yt, p->kernel(), p->stride(), p->padding(), p->dilation());
    return out;
  }
  if (auto* p = dynamic_cast<nn::AvgPool2d*>(&m)) {
    const std::string out = b.fresh("avgpool_out");
    auto& n = b.node("AveragePool", {x}, out);
    attr(n, "kernel_shape", v2(p->kernel()));
    attr(n, "strides", v2(p->stride()));
    attr(n, "pads", pads2(p->padding()));
    attr(n, "count_include_pad", int64_t{p->count_include_pad() ? 1 : 0});
    if (p->ceil_mode()) attr(n, "ceil_mode", int64_t{1});
    check_ceil_mode_sizes("AvgPool2d", p->ceil_mode(), xt, yt, p->kernel(), p->stride(), p->padding(), Size2{1, 1});
    return out;
  }
  if (auto* p = dynamic_cast<nn::AdaptiveAvgPool2d*>(&m)) {
    const Size2 o = p->output_size();
    if (o[0] == 1 && o[1] == 1) return b.apply("GlobalAveragePool", {x});
    const int64_t h = xt.size(2), w = xt.size(3);
    if (h % o[0] || w % o[1]) throw Unsupported(detail::concat("onnx export: AdaptiveAvgPool2d from ", h, "x", w, " to ", o[0], "x", o[1], " (windows of unequal size)"));
    const std::string out = b.fresh("avgpool_out");
    auto& n = b.node("AveragePool", {x}, out);
    attr(n, "kernel_shape", std::vector<int64_t>{h / o[0], w / o[1]});
    attr(n, "strides", std::vector<int64_t>{h / o[0], w / o[1]});
    return out;
  }
  if (auto* bn = dynamic_cast<nn::BatchNorm*>(&m)) {
    const int64_t c = bn->running_mean.size(0);
    const Tensor scale = bn->weight.defined() ? host(bn->weight) : ones({c}, dt);
    const Tensor shift = bn->bias.defined() ? host(bn->bias) : zeros({c}, dt);
    const std::string out = b.fresh("bn_out");
    auto& n = b.node("BatchNormalization",
                     {x, b.initializer("scale", scale), b.initializer("shift", shift), b.initializer("mean", host(bn->running_mean)),
                      b.initializer("var", host(bn->running_var))},
                     out);
    attr(n, "epsilon", bn->eps());
    return out;
  }
  if (auto* ln = dynamic_cast<nn::LayerNorm*>(&m)) return emit_layer_norm(b, *ln, x, dt);
  if (auto* f = dynamic_cast<nn::Flatten*>(&m)) {
    const int64_t end = f->end() < 0 ? f->end() + xt.dim() : f->end();
    if (f->start() == 1 && end == xt.dim() - 1) {
      const std::string out = b.fresh("flatten_out");
      attr(b.node("Flatten", {x}, out), "axis", int64_t{1});
      return out;
    }
    TESSERA_CHECK(f->start() >= 1, "onnx export", "Flatten over the batch axis cannot be exported with a variable batch");
    std::vector<int64_t> shape(yt.shape().begin(), yt.shape().end());
    shape[0] = 0;  // copy the batch size
    return b.apply("Reshape", {x, b.initializer("shape", from_vector(shape, {static_cast<int64_t>(shape.size())}))});
  }
  if (dynamic_cast<nn::Dropout*>(&m)) return b.apply("Identity", {x});
  if (dynamic_cast<nn::ReLU*>(&m)) return b.apply("Relu", {x});
  if (dynamic_cast<nn::Tanh*>(&m)) return b.apply("Tanh", {x});
  if (dynamic_cast<nn::Sigmoid*>(&m)) return b.apply("Sigmoid", {x});
  if (dynamic_cast<nn::SiLU*>(&m)) return b.apply("Mul", {x, b.apply("Sigmoid", {x})});
  if (auto* g = dynamic_cast<nn::GELU*>(&m)) return emit_gelu(b, x, g->tanh_approximation(), dt);
  if (auto* e = dynamic_cast<nn::Embedding*>(&m)) return b.apply("Gather", {b.initializer("weight", host(e->weight)), x});
  throw Unsupported(detail::concat("onnx export: module ", kind, " has no ONNX mapping"));
}

// `variable` names the leading axes that take any size (batch; a language model's sequence too).
void set_value_info(::onnx::ValueInfoProto& v, const std::string& name, const Tensor& t, const std::vector<std::string>& variable) {
  v.set_name(name);
  auto* tt = v.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(dtype_to_onnx(t.dtype()));
  auto* shape = tt->mutable_shape();
  for (int64_t d = 0; d < t.dim(); ++d) {
    auto* dim = shape->add_dim();
    if (d < static_cast<int64_t>(variable.size())) dim->set_dim_param(variable[static_cast<size_t>(d)]);
    else dim->set_dim_value(t.size(d));
  }
}
}  // namespace

std::string export_bytes(nn::Module& module, const Tensor& example_input) {
  NoGradGuard no_grad;
  const bool was_training = module.is_training();
  module.eval();
  ::onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("tessera");
  model.add_opset_import()->set_version(17);
  auto* g = model.mutable_graph();
  g->set_name(module.name());
  Builder b(*g);
  Tensor out;
  std::string result;
  try {
    result = emit(b, module, "input", example_input, out);
  } catch (...) {
    module.train(was_training);
    throw;
  }
  module.train(was_training);
  // The graph output gets its own name through an Identity when the last node is one of ours.
  b.node("Identity", {result}, "output");
  std::vector<std::string> variable = recurrent_variable_axes(module);
  if (variable.empty()) variable = {"batch"};
  if (dynamic_cast<nn::LanguageModel*>(&module)) variable.push_back("sequence");
  variable.resize(std::min<size_t>(variable.size(), static_cast<size_t>(example_input.dim())));
  set_value_info(*g->add_input(), "input", example_input, variable);
  set_value_info(*g->add_output(), "output", out, variable);
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    throw Error(detail::concat("onnx export: the exported model fails the ONNX checker: ", e.what()));
  }
  return model.SerializeAsString();
}

void export_model(nn::Module& module, const Tensor& example_input, const std::string& path) {
  nn::write_file_atomic(path, export_bytes(module, example_input), "onnx export");
}

}  // namespace tessera::onnx
