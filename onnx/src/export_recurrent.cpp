// Export of nn::LSTM and nn::GRU as ONNX LSTM / GRU nodes, one per layer. PyTorch's (and
// Tessera's) gate order is LSTM (i, f, g, o), GRU (r, z, n); ONNX's is LSTM (i, o, f, c), GRU
// (z, r, h), so the weight rows are permuted per gate. The biases stay separate (ONNX's B is
// [Wb, Rb]) because GRU's candidate gate applies the recurrent bias inside the reset product,
// which is ONNX's linear_before_reset = 1, not something a summed bias can express.
#include <functional>

#include "export_builder.h"
#include "tessera/nn/recurrent.h"

namespace tessera::onnx::export_detail {
namespace {
// `t` [G H, ...] with its G gate blocks of H rows in `order` (ONNX gate k = PyTorch gate order[k]),
// with a leading axis of 1 (one direction).
Tensor onnx_gates(const Tensor& t, int64_t hidden, const std::vector<int64_t>& order) {
  const Tensor h = host(t);  // one copy to the host, then views of it
  std::vector<Tensor> blocks;
  for (int64_t g : order) blocks.push_back(h.narrow(0, g * hidden, hidden));
  return cat(blocks, 0).unsqueeze(0).contiguous();
}

std::string emit_layers(Builder& b, const std::string& op, int64_t hidden, const nn::RecurrentOptions& o,
                        const std::function<nn::RecurrentLayer(int64_t)>& layer, const std::vector<int64_t>& order, const std::string& x) {
  const int64_t layout = o.batch_first ? 1 : 0;
  std::string v = x;
  for (int64_t l = 0; l < o.num_layers; ++l) {
    const nn::RecurrentLayer w = layer(l);
    std::vector<std::string> in = {v, b.initializer("W", onnx_gates(w.w_ih, hidden, order)),
                                   b.initializer("R", onnx_gates(w.w_hh, hidden, order))};
    if (w.b_ih.defined()) {
      const Tensor bias = cat({onnx_gates(w.b_ih, hidden, order), onnx_gates(w.b_hh, hidden, order)}, 1);
      in.push_back(b.initializer("B", bias));
    }
    const std::string y = b.fresh(op + "_y");
    auto& n = b.node(op, in, y);
    attr(n, "hidden_size", hidden);
    if (layout) attr(n, "layout", layout);
    // PyTorch's n = tanh(W_n x + b_in + r * (U_n h + b_hn)).
    if (op == "GRU") attr(n, "linear_before_reset", int64_t{1});
    // Y is [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]): drop the one direction.
    v = b.apply("Squeeze", {y, b.ints({layout ? 2 : 1})});
  }
  return v;
}
}  // namespace

std::string emit_recurrent(Builder& b, nn::Module& m, const std::string& x) {
  if (auto* lstm = dynamic_cast<nn::LSTM*>(&m))
    return emit_layers(
        b, "LSTM", lstm->hidden_size(), lstm->options(), [&](int64_t l) { return lstm->layer(l); }, {0, 3, 1, 2}, x);
  if (auto* gru = dynamic_cast<nn::GRU*>(&m))
    return emit_layers(
        b, "GRU", gru->hidden_size(), gru->options(), [&](int64_t l) { return gru->layer(l); }, {1, 0, 2}, x);
  return {};
}

std::vector<std::string> recurrent_variable_axes(const nn::Module& m) {
  const nn::Module* first = &m;
  while (first->name() == "Sequential" && !first->children().empty()) first = first->children().front().second.get();
  const nn::RecurrentOptions* o = nullptr;
  if (auto* lstm = dynamic_cast<const nn::LSTM*>(first)) o = &lstm->options();
  if (auto* gru = dynamic_cast<const nn::GRU*>(first)) o = &gru->options();
  if (!o) return {};
  return o->batch_first ? std::vector<std::string>{"batch", "sequence"} : std::vector<std::string>{"sequence", "batch"};
}

}  // namespace tessera::onnx::export_detail
