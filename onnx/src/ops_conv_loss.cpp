// ONNX ops over Tessera's composed forms: ConvTranspose (1-D, 2-D), the losses
// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, Trilu, ScatterElements and ScatterND (with
// their reductions), OneHot, and
// QuantizeLinear / DequantizeLinear (per tensor or per axis, u8 and i8).
#include "proto.h"

namespace tessera::onnx {

namespace {
// ScatterElements' and ScatterND's `reduction`: the updates replace the data or combine with it.
Tensor scatter_with_reduction(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, const std::string& reduction) {
  if (reduction == "add") return scatter_add(x, axis, index, src);
  if (reduction == "mul") return scatter_reduce(x, axis, index, src, ScatterReduce::prod);
  if (reduction == "max") return scatter_reduce(x, axis, index, src, ScatterReduce::amax);
  if (reduction == "min") return scatter_reduce(x, axis, index, src, ScatterReduce::amin);
  return scatter(x, axis, index, src);
}
void check_scatter_reduction(const ::onnx::NodeProto& n, int64_t) {
  for (const auto& a : n.attribute()) {
    if (a.name() == "reduction" && a.s() != "none" && a.s() != "add" && a.s() != "mul" && a.s() != "max" && a.s() != "min")
      unsupported(n, "reduction \"" + a.s() + "\"");
  }
}
}  // namespace

namespace {
using Out = std::vector<Tensor>;

// Pads (or, negative, crops) axis `axis` of x by lo at the start and hi at the end with zeros.
Tensor pad_axis(const Tensor& x, int64_t axis, int64_t lo, int64_t hi) {
  std::vector<int64_t> pads(static_cast<size_t>(2 * (x.dim() - axis)), 0);
  pads[pads.size() - 2] = lo;
  pads[pads.size() - 1] = hi;
  return pad(x, pads);
}

Tensor conv_transpose(const Ctx& c) {
  const Tensor x0 = c.in(0), w0 = c.in(1);
  if (x0.dim() != 3 && x0.dim() != 4) throw Unsupported(detail::concat("onnx: ConvTranspose over ", x0.dim() - 2, " spatial axes is not supported"));
  const bool one_d = x0.dim() == 3;
  const size_t k = static_cast<size_t>(x0.dim() - 2);
  auto per_axis = [&](const char* name, int64_t fallback) { return c.attr_ints(name, std::vector<int64_t>(k, fallback)); };
  const std::vector<int64_t> stride = per_axis("strides", 1), dilation = per_axis("dilations", 1), out_pad = per_axis("output_padding", 0);
  std::vector<int64_t> pads = c.attr_ints("pads", std::vector<int64_t>(2 * k, 0));
  const std::vector<int64_t> output_shape = c.attr_ints("output_shape");
  const std::string auto_pad = c.attr_s("auto_pad", "NOTSET");
  // The full transposed convolution (no padding), then each axis cut to [begin, begin + size).
  std::vector<int64_t> full(k), size(k), begin(k);
  for (size_t i = 0; i < k; ++i) {
    const int64_t in = x0.size(static_cast<int64_t>(2 + i)), kernel = w0.size(static_cast<int64_t>(2 + i));
    full[i] = stride[i] * (in - 1) + (kernel - 1) * dilation[i] + 1;
    if (!output_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      size[i] = !output_shape.empty() ? output_shape[output_shape.size() - k + i] : in * stride[i];
      // Python's floor division, as ONNX's reference: a negative total (a larger output_shape)
      // puts the extra zeros at the end.
      const int64_t total = full[i] + out_pad[i] - size[i], half = total / 2 - (total % 2 != 0 && total < 0);
      begin[i] = auto_pad == "SAME_UPPER" ? half : total - half;
    } else {
      begin[i] = pads[i];
      size[i] = full[i] + out_pad[i] - pads[i] - pads[k + i];
    }
  }
  const int64_t groups = c.attr_i("group", 1);
  const Tensor x = one_d ? x0.unsqueeze(2) : x0, w = one_d ? w0.unsqueeze(2) : w0;
  const Size2 s2 = one_d ? Size2{1, stride[0]} : Size2{stride[0], stride[1]};
  const Size2 d2 = one_d ? Size2{1, dilation[0]} : Size2{dilation[0], dilation[1]};
  Tensor y = conv_transpose2d(x, w, Tensor(), s2, {0, 0}, {0, 0}, groups, d2);
  if (one_d) y = y.squeeze(2);
  for (size_t i = 0; i < k; ++i) {
    const int64_t axis = static_cast<int64_t>(2 + i);
    y = pad_axis(y, axis, -begin[i], size[i] - (full[i] - begin[i]));
  }
  if (c.has(2)) {
    Shape bs(static_cast<size_t>(y.dim()), 1);
    bs[1] = y.size(1);
    y = add(y, c.in(2).reshape(bs));
  }
  return y;
}

// -input[n, target[n, ...], ...] * weight[target], with ignore_index and ONNX's reductions
// (mean: over the summed weights of the kept targets).
Tensor nll(const Ctx& c, const Tensor& log_probs, const Tensor& target, const Tensor& weight) {
  const std::string reduction = c.attr_s("reduction", "mean");
  const bool has_ignore = c.has_attr("ignore_index");
  const Tensor t = target.to(DType::i64);
  const Tensor kept = has_ignore ? ne(t, c.attr_i("ignore_index", 0)) : ones(t.shape(), DType::boolean, t.device());
  const Tensor safe = where(kept, t, int64_t{0});
  const Tensor picked = take_along_axis(log_probs, safe.unsqueeze(1), 1).squeeze(1);
  Tensor wt = weight.defined() ? index_select(weight, 0, safe.reshape({-1})).reshape(safe.shape()) : ones(safe.shape(), log_probs.dtype(), t.device());
  wt = where(kept, wt.to(log_probs.dtype()), 0.0);
  const Tensor loss = neg(mul(picked, wt));
  if (reduction == "none") return loss;
  if (reduction == "sum") return sum(loss);
  return div(sum(loss), sum(wt));
}

// A scale or zero point: 0-d, or 1-D along `axis` of x.
Tensor quant_param(const Ctx& c, const Tensor& p, const Tensor& x) {
  if (p.dim() == 0 || p.numel() == 1) return p.reshape({});
  Shape s(static_cast<size_t>(x.dim()), 1);
  s[static_cast<size_t>(axis_of(c.attr_i("axis", 1), x.dim(), c.node()))] = p.numel();
  return p.reshape(s);
}

void check_reduction(const ::onnx::NodeProto& n, int64_t) {
  for (const auto& a : n.attribute()) {
    if (a.name() == "reduction" && a.s() != "none" && a.s() != "sum" && a.s() != "mean") unsupported(n, "reduction \"" + a.s() + "\"");
  }
}
}  // namespace

void register_conv_loss_ops(OpTable& t) {
  t["ConvTranspose"] = {[](const Ctx& c) { return Out{conv_transpose(c)}; }, {}};
  t["NegativeLogLikelihoodLoss"] = {[](const Ctx& c) { return Out{nll(c, c.in(0), c.in(1), c.has(2) ? c.in(2) : Tensor())}; },
                                    check_reduction};
  t["SoftmaxCrossEntropyLoss"] = {[](const Ctx& c) {
                                    const Tensor x = c.in(0);
                                    const Tensor lp = log_softmax(is_floating(x.dtype()) && x.dtype() != DType::f64 ? x.to(DType::f32) : x, 1);
                                    const Tensor loss = nll(c, lp, c.in(1), c.has(2) ? c.in(2) : Tensor());
                                    return Out{loss.to(x.dtype()), lp.to(x.dtype())};
                                  },
                                  check_reduction};
  t["Trilu"] = {[](const Ctx& c) {
                  const Tensor x = c.in(0);
                  const int64_t k = c.has(1) ? static_cast<int64_t>(c.scalar(1)) : 0, m = x.size(-2), n = x.size(-1);
                  // j - i against k, for row i and column j
                  const Tensor diff = sub(arange(0, static_cast<double>(n), 1, DType::i64, x.device()).reshape({1, n}),
                                          arange(0, static_cast<double>(m), 1, DType::i64, x.device()).reshape({m, 1}));
                  const Tensor keep = c.attr_i("upper", 1) != 0 ? ge(diff, k) : le(diff, k);
                  return Out{where(keep, x, zeros({}, x.dtype(), x.device()))};
                },
                {}};
  const OpDef scatter_elements = {[](const Ctx& c) {
                                    const Tensor x = c.in(0), src = c.in(2);
                                    const int64_t axis = axis_of(c.attr_i("axis", 0), x.dim(), c.node());
                                    // Negative indices count from the end of the axis.
                                    const Tensor i = c.in(1).to(DType::i64);
                                    const Tensor index = where(lt(i, int64_t{0}), add(i, x.size(axis)), i);
                                    return Out{scatter_with_reduction(x, axis, index, src, c.attr_s("reduction", "none"))};
                                  },
                                  &check_scatter_reduction};
  // ScatterND as a scatter along axis 0 of the data seen as [rows addressed by the index, rest].
  t["ScatterND"] = {[](const Ctx& c) {
                      const Tensor x = c.in(0), idx = c.in(1).to(DType::i64), updates = c.in(2);
                      const int64_t k = idx.size(idx.dim() - 1);
                      if (k > x.dim()) throw Unsupported(detail::concat("onnx: ScatterND index depth ", k, " exceeds the data's rank ", x.dim()));
                      std::vector<int64_t> dims(x.shape().begin(), x.shape().begin() + k), steps(static_cast<size_t>(k), 1);
                      for (int64_t j = k - 2; j >= 0; --j) steps[j] = steps[j + 1] * dims[j + 1];
                      const Tensor dim_t = from_vector(dims, {k}).to(x.device()), step_t = from_vector(steps, {k}).to(x.device());
                      const Tensor wrapped = where(lt(idx, int64_t{0}), add(idx, dim_t), idx);
                      const int64_t rows = k ? steps[0] * dims[0] : 1, m = idx.numel() / std::max<int64_t>(k, 1);
                      const int64_t rest = rows ? x.numel() / rows : 0;
                      const Tensor row = sum(mul(wrapped, step_t), {-1}).reshape({m, 1}).expand({m, rest}).contiguous();
                      const Tensor y = scatter_with_reduction(x.reshape({rows, rest}), 0, row, updates.reshape({m, rest}), c.attr_s("reduction", "none"));
                      return Out{y.reshape(x.shape())};
                    },
                    &check_scatter_reduction};
  t["OneHot"] = {[](const Ctx& c) {
                   const Tensor idx = c.in(0).to(DType::i64), values = c.in(2);
                   const int64_t depth = static_cast<int64_t>(c.scalar(1)), axis = axis_of(c.attr_i("axis", -1), idx.dim() + 1, c.node());
                   Shape classes(static_cast<size_t>(idx.dim() + 1), 1);
                   classes[static_cast<size_t>(axis)] = depth;
                   const Tensor wrapped = where(lt(idx, int64_t{0}), add(idx, depth), idx);  // out of range: all off
                   const Tensor hot = eq(wrapped.unsqueeze(axis), arange(0, static_cast<double>(depth), 1, DType::i64, idx.device()).reshape(classes));
                   return Out{where(hot, values.narrow(0, 1, 1).reshape({}), values.narrow(0, 0, 1).reshape({}))};
                 },
                 {}};
  t["QuantizeLinear"] = {[](const Ctx& c) {
                           // saturate(round_half_even(x / scale) + zero_point)
                           const Tensor x = c.in(0);
                           const DType out = c.has(2) ? c.in(2).dtype() : DType::u8;
                           if (out != DType::u8 && out != DType::i8) throw Unsupported(detail::concat("onnx: QuantizeLinear to ", out, " is not supported"));
                           Tensor q = round(div(x.to(DType::f32), quant_param(c, c.in(1), x).to(DType::f32)));
                           if (c.has(2)) q = add(q, quant_param(c, c.in(2), x).to(DType::f32));
                           return Out{clamp(q, out == DType::u8 ? 0.0 : -128.0, out == DType::u8 ? 255.0 : 127.0).to(out)};
                         },
                         {}};
  t["DequantizeLinear"] = {[](const Ctx& c) {
                             const Tensor x = c.in(0), scale = quant_param(c, c.in(1), x);
                             Tensor v = x.to(DType::f32);
                             if (c.has(2)) v = sub(v, quant_param(c, c.in(2), x).to(DType::f32));
                             return Out{mul(v, scale.to(DType::f32)).to(scale.dtype())};
                           },
                           {}};
  t["ScatterElements"] = scatter_elements;
  t["Scatter"] = scatter_elements;  // deprecated alias (opset 9-10)
}

}  // namespace tessera::onnx
