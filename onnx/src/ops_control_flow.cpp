// ONNX control flow: Loop (a body subgraph run while its trip count and condition allow,
// loop-carried values threaded through, scan outputs stacked), Scan (a body over slices of its
// scan inputs, states threaded through) and If (one of two branch subgraphs). Subgraphs see the enclosing graph's values (run_subgraph,
// model.cpp); their nodes were mapped when the model loaded.
#include <algorithm>

#include "proto.h"

namespace tessera::onnx {
namespace {
using Out = std::vector<Tensor>;

bool host_bool(const Tensor& t, const char* what) {
  TESSERA_CHECK(t.numel() == 1, "onnx", what, " must hold one value, got ", shape_str(t.shape()));
  return t.to(kCPU).to(DType::f64).reshape({}).item<double>() != 0;
}

// Loop(M?, cond?, v_initial...): body(iteration_num, cond, v...) -> (cond, v..., scans...);
// outputs the final v... and each scan output stacked along a new first axis.
Out loop(const Ctx& c) {
  const ::onnx::GraphProto& body = c.attr_g("body");
  const size_t carried = c.num_inputs() > 2 ? c.num_inputs() - 2 : 0;
  TESSERA_CHECK(static_cast<size_t>(body.input_size()) == carried + 2 && static_cast<size_t>(body.output_size()) >= carried + 1, "onnx",
                "Loop body takes (iteration_num, cond, ", carried,
                " carried values) and returns (cond, the carried values, scans...), got ", body.input_size(), " inputs and ",
                body.output_size(), " outputs");
  const size_t scans = static_cast<size_t>(body.output_size()) - carried - 1;
  const int64_t trips = c.has(0) ? static_cast<int64_t>(c.scalar(0)) : std::numeric_limits<int64_t>::max();
  bool go = c.has(1) ? host_bool(c.in(1), "Loop cond") : true;
  TESSERA_CHECK(c.has(0) || c.has(1), "onnx", "Loop without a trip count or a condition would not end");
  std::vector<Tensor> values;
  for (size_t i = 0; i < carried; ++i) values.push_back(c.in(2 + i));
  std::vector<std::vector<Tensor>> scanned(scans);
  for (int64_t it = 0; it < trips && go; ++it) {
    std::vector<Tensor> in{full({}, it, DType::i64, c.device()), full({}, go ? 1 : 0, DType::boolean, c.device())};
    in.insert(in.end(), values.begin(), values.end());
    const std::vector<Tensor> out = run_subgraph(body, in, c.scope(), c.device(), c.opset());
    go = host_bool(out[0], "Loop body's cond output");
    for (size_t i = 0; i < carried; ++i) values[i] = out[1 + i];
    for (size_t k = 0; k < scans; ++k) scanned[k].push_back(out[1 + carried + k]);
  }
  Out result = values;
  for (auto& parts : scanned) result.push_back(parts.empty() ? empty({0}, DType::f32, c.device()) : stack(parts, 0));
  return result;
}

// One Scan (opset 9 semantics) over states and scan inputs already without a batch dim.
Out scan_once(const Ctx& c, std::vector<Tensor> states, const std::vector<Tensor>& inputs, const std::vector<int64_t>& in_axes,
              const std::vector<int64_t>& in_dirs, const std::vector<int64_t>& out_axes, const std::vector<int64_t>& out_dirs) {
  const ::onnx::GraphProto& body = c.attr_g("body");
  const size_t n = states.size(), m = inputs.size();
  TESSERA_CHECK(static_cast<size_t>(body.input_size()) == n + m && static_cast<size_t>(body.output_size()) >= n, "onnx", "Scan body takes ",
                n, " states and ", m, " scan inputs, got a body of ", body.input_size(), " inputs");
  const size_t k = static_cast<size_t>(body.output_size()) - n;
  int64_t steps = -1;
  std::vector<int64_t> axes(m);
  for (size_t i = 0; i < m; ++i) {
    axes[i] = axis_of(i < in_axes.size() ? in_axes[i] : 0, inputs[i].dim(), c.node());
    const int64_t len = inputs[i].size(axes[i]);
    TESSERA_CHECK(steps < 0 || len == steps, "onnx", "Scan inputs of different lengths: ", steps, " and ", len);
    steps = len;
  }
  std::vector<std::vector<Tensor>> outs(k);
  for (int64_t t = 0; t < std::max<int64_t>(steps, 0); ++t) {
    std::vector<Tensor> in = states;
    for (size_t i = 0; i < m; ++i) in.push_back(inputs[i].select(axes[i], i < in_dirs.size() && in_dirs[i] ? steps - 1 - t : t));
    const std::vector<Tensor> out = run_subgraph(body, in, c.scope(), c.device(), c.opset());
    for (size_t i = 0; i < n; ++i) states[i] = out[i];
    for (size_t j = 0; j < k; ++j) outs[j].push_back(out[n + j]);
  }
  Out result = states;
  for (size_t j = 0; j < k; ++j) {
    if (j < out_dirs.size() && out_dirs[j]) std::reverse(outs[j].begin(), outs[j].end());
    TESSERA_CHECK(!outs[j].empty(), "onnx", "Scan over zero steps has no shape for its scan outputs");
    const int64_t rank = outs[j][0].dim() + 1;
    result.push_back(stack(outs[j], axis_of(j < out_axes.size() ? out_axes[j] : 0, rank, c.node())));
  }
  return result;
}

// Scan: opset >= 9 as scan_once; opset 8 has a leading sequence_lens input and a batch axis 0
// on every state and scan input (scanned along axis 1), run here one batch entry at a time.
Out scan(const Ctx& c) {
  const int64_t m = c.attr_i("num_scan_inputs", 0);
  const bool v8 = c.opset() < 9;
  const size_t first = v8 ? 1 : 0, total = c.num_inputs() - first;
  TESSERA_CHECK(m > 0 && static_cast<size_t>(m) <= total, "onnx", "Scan num_scan_inputs ", m, " does not fit its ", total, " inputs");
  const size_t n = total - static_cast<size_t>(m);
  std::vector<Tensor> states, inputs;
  for (size_t i = 0; i < n; ++i) states.push_back(c.in(first + i));
  for (size_t i = n; i < total; ++i) inputs.push_back(c.in(first + i));
  if (!v8) {
    return scan_once(c, states, inputs, c.attr_ints("scan_input_axes"), c.attr_ints("scan_input_directions"),
                     c.attr_ints("scan_output_axes"), c.attr_ints("scan_output_directions"));
  }
  const std::vector<int64_t> dirs = c.attr_ints("directions");
  const int64_t batch = inputs[0].size(0), steps = inputs[0].size(1);
  if (c.has(0)) {
    for (int64_t len : c.ints(0)) {
      if (len != steps) throw Unsupported("onnx: Scan (opset 8) with sequence_lens shorter than the sequence is not supported");
    }
  }
  TESSERA_CHECK(batch > 0, "onnx", "Scan (opset 8) over an empty batch has no shape for its outputs");
  std::vector<Out> per_batch;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Tensor> s, in;
    for (const Tensor& t : states) s.push_back(t.select(0, b));
    for (const Tensor& t : inputs) in.push_back(t.select(0, b));
    per_batch.push_back(scan_once(c, s, in, {}, dirs, {}, {}));
  }
  Out result;
  for (size_t j = 0; j < per_batch[0].size(); ++j) {
    std::vector<Tensor> parts;
    for (const Out& o : per_batch) parts.push_back(o[j]);
    result.push_back(stack(parts, 0));
  }
  return result;
}

Out if_node(const Ctx& c) {
  const ::onnx::GraphProto& branch = c.attr_g(host_bool(c.in(0), "If cond") ? "then_branch" : "else_branch");
  return run_subgraph(branch, {}, c.scope(), c.device(), c.opset());
}
}  // namespace

void register_control_flow_ops(OpTable& t) {
  t["Loop"] = {&loop, {}};
  t["If"] = {&if_node, {}};
  t["Scan"] = {&scan, {}};
}

}  // namespace tessera::onnx
