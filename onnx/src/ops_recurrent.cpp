// ONNX LSTM, GRU and RNN (opsets 7-14): every direction, sequence_lens, initial states, LSTM
// peepholes, GRU's linear_before_reset and layout 1 (batch first). Each time step is two
// matmuls and the gate arithmetic on the model's device; a sequence shorter than the batch's
// longest keeps its state and writes zeros past its end, as the ONNX reference does. Custom
// activations, clip and input_forget are refused when the model loads.
#include <algorithm>

#include "proto.h"

namespace tessera::onnx {
namespace {
using Out = std::vector<Tensor>;
enum class Cell { lstm, gru, rnn };

int gates_of(Cell k) { return k == Cell::lstm ? 4 : k == Cell::gru ? 3 : 1; }

// Per batch element b, time t of the sequence read backwards within its length:
// idx[t][b] = len_b - 1 - t for t < len_b, t otherwise (never read: masked).
Tensor reversal_index(const std::vector<int64_t>& lens, int64_t seq, Device d) {
  const auto batch = static_cast<int64_t>(lens.size());
  std::vector<int64_t> idx(static_cast<size_t>(seq * batch));
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t b = 0; b < batch; ++b) idx[static_cast<size_t>(t * batch + b)] = t < lens[static_cast<size_t>(b)] ? lens[static_cast<size_t>(b)] - 1 - t : t;
  return from_vector(idx, {seq, batch}).to(d);
}
// x [seq, batch, ...] with each batch column's first len_b steps reversed.
Tensor reverse_within(const Tensor& x, const Tensor& index) {
  Shape s = x.shape();
  Shape view(s.size(), 1);
  view[0] = s[0], view[1] = s[1];
  return gather(x, 0, index.reshape(view).expand(s).contiguous());
}

Out run_cell(const Ctx& c, Cell kind) {
  const int64_t layout = c.attr_i("layout", 0);
  Tensor x = c.in(0);
  if (layout == 1) x = x.transpose(0, 1);  // [batch, seq, in] -> [seq, batch, in]
  const DType dt = x.dtype();
  const int64_t seq = x.size(0), batch = x.size(1), hidden = c.attr_i("hidden_size", c.in(2).size(2));
  const int64_t g = gates_of(kind), gh = g * hidden;
  const std::string direction = c.attr_s("direction", "forward");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const Tensor w = c.in(1), r = c.in(2);
  TESSERA_CHECK(w.dim() == 3 && w.size(0) == dirs && w.size(1) == gh && r.dim() == 3 && r.size(1) == gh && r.size(2) == hidden, "onnx",
                c.node().op_type(), ": W ", shape_str(w.shape()), " and R ", shape_str(r.shape()), " do not fit hidden_size ", hidden, " and ", dirs,
                " direction(s)");
  const Tensor bias = c.has(3) ? c.in(3) : zeros({dirs, 2 * gh}, dt, x.device());
  std::vector<int64_t> lens(static_cast<size_t>(batch), seq);
  if (c.has(4)) {
    const std::vector<double> l = host_doubles(c.in(4));
    for (size_t b = 0; b < lens.size() && b < l.size(); ++b) lens[b] = std::clamp<int64_t>(static_cast<int64_t>(l[b]), 0, seq);
  }
  // [seq, batch, 1]: step t of element b is real.
  std::vector<uint8_t> live(static_cast<size_t>(seq * batch));
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t b = 0; b < batch; ++b) live[static_cast<size_t>(t * batch + b)] = t < lens[static_cast<size_t>(b)];
  const Tensor alive = from_vector(live, {seq, batch, 1}).to(DType::boolean).to(x.device());
  auto state_in = [&](size_t i) {  // initial_h / initial_c: [dirs, batch, hidden] (layout 1: [batch, dirs, hidden])
    if (!c.has(i)) return zeros({dirs, batch, hidden}, dt, x.device());
    return layout == 1 ? c.in(i).transpose(0, 1) : c.in(i);
  };
  const Tensor h0 = state_in(5), c0 = kind == Cell::lstm ? state_in(6) : Tensor();
  const bool linear_before_reset = c.attr_i("linear_before_reset", 0) != 0;
  const Tensor rev = reversal_index(lens, seq, x.device());
  std::vector<Tensor> ys, hs, cs;
  for (int64_t d = 0; d < dirs; ++d) {
    const bool backwards = direction == "reverse" || d == 1;
    const Tensor xs = backwards ? reverse_within(x, rev) : x;
    const Tensor wd = w.select(0, d).mT(), rd = r.select(0, d).mT();
    const Tensor wb = bias.select(0, d).narrow(0, 0, gh), rb = bias.select(0, d).narrow(0, gh, gh);
    const Tensor peep = kind == Cell::lstm && c.has(7) ? c.in(7).select(0, d) : Tensor();
    // The input projections of every step at once: [seq, batch, G H].
    const Tensor xw = add(matmul(xs, wd), wb);
    Tensor h = h0.select(0, d), cell = kind == Cell::lstm ? c0.select(0, d) : Tensor();
    std::vector<Tensor> steps;
    for (int64_t t = 0; t < seq; ++t) {
      const Tensor gx = xw.select(0, t), keep = alive.select(0, t);
      Tensor h_new, c_new;
      if (kind == Cell::rnn) {
        h_new = tanh(add(gx, add(matmul(h, rd), rb)));
      } else if (kind == Cell::lstm) {  // gate order i, o, f, c
        const Tensor gates = add(gx, add(matmul(h, rd), rb));
        Tensor i = gates.narrow(1, 0, hidden), o = gates.narrow(1, hidden, hidden), f = gates.narrow(1, 2 * hidden, hidden);
        const Tensor cand = tanh(gates.narrow(1, 3 * hidden, hidden));
        if (peep.defined()) {
          i = add(i, mul(peep.narrow(0, 0, hidden), cell));
          f = add(f, mul(peep.narrow(0, 2 * hidden, hidden), cell));
        }
        c_new = add(mul(sigmoid(f), cell), mul(sigmoid(i), cand));
        if (peep.defined()) o = add(o, mul(peep.narrow(0, hidden, hidden), c_new));
        h_new = mul(sigmoid(o), tanh(c_new));
        c_new = where(keep, c_new, cell);
        cell = c_new;
      } else {  // GRU, gate order z, r, h
        const Tensor hr = matmul(h, rd);  // [batch, 3H] without the recurrent bias
        const Tensor z = sigmoid(add(add(gx.narrow(1, 0, hidden), hr.narrow(1, 0, hidden)), rb.narrow(0, 0, hidden)));
        const Tensor rg = sigmoid(add(add(gx.narrow(1, hidden, hidden), hr.narrow(1, hidden, hidden)), rb.narrow(0, hidden, hidden)));
        const Tensor rbh = rb.narrow(0, 2 * hidden, hidden);
        const Tensor rec = linear_before_reset ? mul(rg, add(hr.narrow(1, 2 * hidden, hidden), rbh))
                                               : add(matmul(mul(rg, h), rd.narrow(1, 2 * hidden, hidden)), rbh);
        const Tensor cand = tanh(add(gx.narrow(1, 2 * hidden, hidden), rec));
        h_new = add(mul(sub(1.0, z), cand), mul(z, h));
      }
      h = where(keep, h_new, h);
      steps.push_back(where(keep, h_new, zeros_like(h_new)));
    }
    Tensor y = stack(steps, 0);  // [seq, batch, hidden]
    if (backwards) y = where(alive, reverse_within(y, rev), zeros_like(y));
    ys.push_back(y);
    hs.push_back(h);
    if (kind == Cell::lstm) cs.push_back(cell);
  }
  Tensor y = stack(ys, 1), yh = stack(hs, 0);  // [seq, dirs, batch, hidden], [dirs, batch, hidden]
  Tensor yc = kind == Cell::lstm ? stack(cs, 0) : Tensor();
  if (layout == 1) {
    y = y.permute({2, 0, 1, 3}).contiguous();  // [batch, seq, dirs, hidden]
    yh = yh.transpose(0, 1).contiguous();
    if (yc.defined()) yc = yc.transpose(0, 1).contiguous();
  }
  Out out{y, yh};
  if (kind == Cell::lstm) out.push_back(yc);
  return out;
}

// Load-time refusals: what the runner above does not compute.
void check_cell(const ::onnx::NodeProto& n, Cell kind) {
  static const std::vector<std::vector<std::string>> defaults = {{"Sigmoid", "Tanh", "Tanh"}, {"Sigmoid", "Tanh"}, {"Tanh"}};
  const auto& want = defaults[static_cast<size_t>(kind)];
  for (const auto& a : n.attribute()) {
    if (a.name() == "clip") throw Unsupported("onnx: " + n.op_type() + " with clip is not supported");
    if (a.name() == "input_forget" && a.i() != 0) throw Unsupported("onnx: " + n.op_type() + " with input_forget is not supported");
    if (a.name() == "activations") {
      bool same = a.strings_size() % static_cast<int>(want.size()) == 0;
      for (int i = 0; same && i < a.strings_size(); ++i) same = a.strings(i) == want[static_cast<size_t>(i) % want.size()];
      if (!same) throw Unsupported("onnx: " + n.op_type() + " with activations other than the defaults is not supported");
    }
  }
}
}  // namespace

void register_recurrent_ops(OpTable& t) {
  t["LSTM"] = {[](const Ctx& c) { return run_cell(c, Cell::lstm); }, [](const ::onnx::NodeProto& n, int64_t) { check_cell(n, Cell::lstm); }};
  t["GRU"] = {[](const Ctx& c) { return run_cell(c, Cell::gru); }, [](const ::onnx::NodeProto& n, int64_t) { check_cell(n, Cell::gru); }};
  t["RNN"] = {[](const Ctx& c) { return run_cell(c, Cell::rnn); }, [](const ::onnx::NodeProto& n, int64_t) { check_cell(n, Cell::rnn); }};
}

}  // namespace tessera::onnx
