// ONNX neural-network ops: MatMul, Gemm, Conv, pooling, normalisation, (Log)Softmax,
// Hardmax, reductions, ArgMax/ArgMin, TopK, CumSum, Dropout (inference).
#include <cmath>

#include "proto.h"

namespace tessera::onnx {

std::vector<int64_t> onnx_axes(const Ctx& c, size_t input, int64_t since);

namespace {
using Out = std::vector<Tensor>;

// Spatial padding [begin..., end...] of a pooling/conv node, auto_pad resolved for `in` sizes.
struct Window {
  std::vector<int64_t> kernel, stride, dilation, pad_begin, pad_end;
};
Window window_of(const Ctx& c, const Tensor& x, std::vector<int64_t> kernel) {
  const size_t k = kernel.size();
  Window w;
  w.kernel = kernel;
  w.stride = c.attr_ints("strides", std::vector<int64_t>(k, 1));
  w.dilation = c.attr_ints("dilations", std::vector<int64_t>(k, 1));
  const std::vector<int64_t> pads = c.attr_ints("pads", std::vector<int64_t>(2 * k, 0));
  w.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(k));
  w.pad_end.assign(pads.begin() + static_cast<int64_t>(k), pads.end());
  const std::string mode = c.attr_s("auto_pad", "NOTSET");
  if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
    for (size_t i = 0; i < k; ++i) {
      const int64_t in = x.size(static_cast<int64_t>(2 + i)), s = w.stride[i];
      const int64_t out = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (out - 1) * s + (kernel[i] - 1) * w.dilation[i] + 1 - in);
      w.pad_begin[i] = mode == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pad_end[i] = total - w.pad_begin[i];
    }
  } else if (mode == "VALID") {
    std::fill(w.pad_begin.begin(), w.pad_begin.end(), 0);
    std::fill(w.pad_end.begin(), w.pad_end.end(), 0);
  }
  return w;
}
// Padding Tessera's pooling takes itself: the same at both ends and at most half the kernel.
bool symmetric(const Window& w) {
  if (w.pad_begin != w.pad_end) return false;
  for (size_t i = 0; i < w.kernel.size(); ++i) {
    if (2 * w.pad_begin[i] > w.kernel[i]) return false;
  }
  return true;
}
// x with its spatial axes padded by `value` ([N, C, spatial...]): core pad() takes the last
// axis first.
Tensor pad_spatial(const Tensor& x, const Window& w, double value) {
  std::vector<int64_t> pads;
  for (size_t i = w.pad_begin.size(); i-- > 0;) pads.insert(pads.end(), {w.pad_begin[i], w.pad_end[i]});
  return pad(x, pads, PadMode::constant, value);
}
// 1-D and 2-D windows only: a 1-D input runs as 2-D with a height of 1.
void check_rank(const Ctx& c, const Tensor& x) {
  if (x.dim() != 3 && x.dim() != 4) throw Unsupported(detail::concat("onnx: ", c.node().op_type(), " over ", x.dim() - 2, " spatial axes is not supported"));
}
Window as_2d(Window w) {
  if (w.kernel.size() == 2) return w;
  for (auto* v : {&w.kernel, &w.stride, &w.dilation}) v->insert(v->begin(), 1);
  w.pad_begin.insert(w.pad_begin.begin(), 0);
  w.pad_end.insert(w.pad_end.begin(), 0);
  return w;
}

Tensor conv(const Ctx& c) {
  const Tensor x0 = c.in(0), w0 = c.in(1);
  if (x0.dim() == 5) {
    const Window win = window_of(c, x0, std::vector<int64_t>(w0.shape().begin() + 2, w0.shape().end()));
    const bool sym = win.pad_begin == win.pad_end;
    const Tensor in = sym ? x0 : pad_spatial(x0, win, 0.0);
    const Size3 pad = sym ? Size3{win.pad_begin[0], win.pad_begin[1], win.pad_begin[2]} : Size3{0, 0, 0};
    return conv3d(in, w0, c.has(2) ? c.in(2) : Tensor(), Size3{win.stride[0], win.stride[1], win.stride[2]}, pad,
                  Size3{win.dilation[0], win.dilation[1], win.dilation[2]}, c.attr_i("group", 1));
  }
  check_rank(c, x0);
  const bool one_d = x0.dim() == 3;
  const Tensor x = one_d ? x0.unsqueeze(2) : x0, wt = one_d ? w0.unsqueeze(2) : w0;
  std::vector<int64_t> kernel(w0.shape().begin() + 2, w0.shape().end());
  Window win = as_2d(window_of(c, x0, kernel));
  Tensor in = x;
  Size2 pad = {win.pad_begin[0], win.pad_begin[1]};
  if (!symmetric(win)) {
    in = pad_spatial(x, win, 0.0);
    pad = {0, 0};
  }
  Tensor y = conv2d(in, wt, c.has(2) ? c.in(2) : Tensor(), Size2{win.stride[0], win.stride[1]}, pad, Size2{win.dilation[0], win.dilation[1]},
                    c.attr_i("group", 1));
  return one_d ? y.squeeze(2) : y;
}

// 3-D max or average pooling without padding, dilation or ceil_mode, as two 2-D pools: over
// (H, W), then over D with the H x W plane flattened (both are separable for whole windows).
Tensor pool3d(const Ctx& c, const Tensor& x, bool is_max) {
  const Window w = window_of(c, x, c.attr_ints("kernel_shape"));
  for (size_t i = 0; i < 3; ++i) {
    if (w.pad_begin[i] || w.pad_end[i] || w.dilation[i] != 1 || c.attr_i("ceil_mode", 0)) {
      throw Unsupported("onnx: " + c.node().op_type() + " over 3 spatial axes with padding, dilation or ceil_mode is not supported");
    }
  }
  const auto pool2 = [&](const Tensor& t, Size2 k, Size2 s) { return is_max ? max_pool2d(t, k, s) : avg_pool2d(t, k, s); };
  const int64_t n = x.size(0), ch = x.size(1), d = x.size(2);
  const Tensor hw = pool2(x.reshape({n, ch * d, x.size(3), x.size(4)}), Size2{w.kernel[1], w.kernel[2]}, Size2{w.stride[1], w.stride[2]});
  const int64_t h = hw.size(2), wd = hw.size(3);
  const Tensor dd = pool2(hw.reshape({n * ch, 1, d, h * wd}), Size2{w.kernel[0], 1}, Size2{w.stride[0], 1});
  return dd.reshape({n, ch, dd.size(2), h, wd});
}

Tensor pool(const Ctx& c, bool is_max) {
  const Tensor x_in = c.in(0);
  if (x_in.dim() == 5 && is_floating(x_in.dtype())) return pool3d(c, x_in, is_max);
  check_rank(c, x_in);
  // Integer maxima are exact in a float wide enough for them.
  const Tensor x0 = is_floating(x_in.dtype()) ? x_in : x_in.to(itemsize(x_in.dtype()) <= 2 ? DType::f32 : DType::f64);
  const bool one_d = x0.dim() == 3;
  const Tensor x = one_d ? x0.unsqueeze(2) : x0;
  Window win = as_2d(window_of(c, x0, c.attr_ints("kernel_shape")));
  const Size2 k = {win.kernel[0], win.kernel[1]}, s = {win.stride[0], win.stride[1]};
  Tensor y;
  if (c.attr_i("ceil_mode", 0) != 0) {
    if (!symmetric(win)) throw Unsupported("onnx: " + c.node().op_type() + " with ceil_mode and asymmetric padding is not supported");
    const Size2 pad = {win.pad_begin[0], win.pad_begin[1]}, dil = {win.dilation[0], win.dilation[1]};
    y = is_max ? max_pool2d(x, k, s, pad, dil, true) : avg_pool2d(x, k, s, pad, c.attr_i("count_include_pad", 0) != 0, true);
    // ONNX rounds up without PyTorch's rule that no window starts in the right padding.
    for (int i = 0; i < 2; ++i) {
      const int64_t span = x.size(2 + i) + 2 * pad[i] - (k[i] - 1) * dil[i] - 1, want = (span + s[i] - 1) / s[i] + 1;
      if (y.size(2 + i) != want) throw Unsupported("onnx: " + c.node().op_type() + " with ceil_mode where a window would start in the padding");
    }
    if (one_d) y = y.squeeze(2);
    return y.dtype() == x_in.dtype() ? y : y.to(x_in.dtype());
  }
  if (is_max) {
    const bool sym = symmetric(win);
    const Tensor in = sym ? x : pad_spatial(x, win, -INFINITY);
    const Size2 pad = sym ? Size2{win.pad_begin[0], win.pad_begin[1]} : Size2{0, 0};
    y = max_pool2d(in, k, s, pad, Size2{win.dilation[0], win.dilation[1]});
  } else {
    const bool include = c.attr_i("count_include_pad", 0) != 0;
    if (symmetric(win)) {
      y = avg_pool2d(x, k, s, Size2{win.pad_begin[0], win.pad_begin[1]}, include);
    } else {
      // Asymmetric padding: pad explicitly; without count_include_pad divide by the real cells.
      const Tensor sums = avg_pool2d(pad_spatial(x, win, 0.0), k, s, Size2{0, 0}, true);
      y = include ? sums : div(sums, avg_pool2d(pad_spatial(ones_like(x), win, 0.0), k, s, Size2{0, 0}, true));
    }
  }
  if (one_d) y = y.squeeze(2);
  return y.dtype() == x_in.dtype() ? y : y.to(x_in.dtype());
}

// Softmax-family axis: before opset 13 the input is coerced to 2-D at `axis` (default 1).
Tensor softmax_like(const Ctx& c, Tensor (*fn)(const Tensor&, int64_t)) {
  const Tensor x = c.in(0);
  if (c.opset() >= 13) return fn(x, axis_of(c.attr_i("axis", -1), x.dim(), c.node()));
  const int64_t a = axis_of(c.attr_i("axis", 1), x.dim(), c.node());
  int64_t outer = 1;
  for (int64_t d = 0; d < a; ++d) outer *= x.size(d);
  return fn(x.reshape({outer, -1}), 1).reshape(x.shape());
}
Tensor hardmax_2d(const Tensor& x, int64_t axis) {
  const Tensor h = one_hot(argmax(x, axis), x.size(axis));  // the class axis last
  std::vector<int64_t> order;
  for (int64_t d = 0; d < x.dim(); ++d) order.push_back(d < axis ? d : d == axis ? x.dim() - 1 : d - 1);
  return h.permute(order).to(x.dtype());
}

// A reduction with ONNX's axes/keepdims/noop_with_empty_axes; integer sums keep the dtype.
void reduce(OpTable& t, const char* name, int64_t axes_input_since, Tensor (*fn)(const Tensor&, const Axes&, bool)) {
  t[name] = {[fn, axes_input_since](const Ctx& c) {
               const Tensor x = c.in(0);
               std::vector<int64_t> axes = onnx_axes(c, 1, axes_input_since);
               const bool keep = c.attr_i("keepdims", 1) != 0;
               if (axes.empty() && c.attr_i("noop_with_empty_axes", 0) != 0) return Out{x};
               for (int64_t& a : axes) a = axis_of(a, x.dim(), c.node());
               Tensor y = fn(x, axes, keep);
               return Out{y.dtype() == x.dtype() ? y : y.to(x.dtype())};
             },
             {}};
}
Tensor r_sum(const Tensor& x, const Axes& a, bool k) { return sum(x, a, k); }
Tensor r_mean(const Tensor& x, const Axes& a, bool k) { return mean(is_floating(x.dtype()) ? x : x.to(DType::f64), a, k); }
Tensor r_max(const Tensor& x, const Axes& a, bool k) { return amax(x, a, k); }
Tensor r_min(const Tensor& x, const Axes& a, bool k) { return amin(x, a, k); }
Tensor r_prod(const Tensor& x, const Axes& a, bool k) { return prod(x, a, k); }
Tensor r_l1(const Tensor& x, const Axes& a, bool k) { return sum(abs(x), a, k); }
Tensor r_l2(const Tensor& x, const Axes& a, bool k) { return sqrt(sum(square(x.to(is_floating(x.dtype()) ? x.dtype() : DType::f64)), a, k)); }
Tensor r_sumsq(const Tensor& x, const Axes& a, bool k) { return sum(square(x), a, k); }
Tensor r_logsum(const Tensor& x, const Axes& a, bool k) { return log(sum(x, a, k)); }
Tensor r_logsumexp(const Tensor& x, const Axes& a, bool k) { return logsumexp(x, a, k); }

Tensor reversed(const Tensor& x, int64_t axis) {
  return index_select(x, axis, arange(static_cast<double>(x.size(axis) - 1), -1.0, -1.0, DType::i64, x.device()));
}
Tensor arg_extreme(const Ctx& c, bool is_max) {
  const Tensor x = c.in(0);
  const int64_t a = axis_of(c.attr_i("axis", 0), x.dim(), c.node());
  const bool keep = c.attr_i("keepdims", 1) != 0;
  if (c.attr_i("select_last_index", 0) == 0) return is_max ? argmax(x, a, keep) : argmin(x, a, keep);
  const Tensor r = is_max ? argmax(reversed(x, a), a, keep) : argmin(reversed(x, a), a, keep);
  return sub(full({}, x.size(a) - 1, DType::i64, x.device()), r);
}
// MaxPool with its Indices output: ONNX numbers an element by its offset in the whole input,
// row-major (storage_order 0) or with H and W swapped (1); Tessera's argmax is h * W + w within
// a plane.
Out max_pool_with_indices(const Ctx& c) {
  const Tensor x = c.in(0);
  if (x.dim() != 4 || c.attr_i("ceil_mode", 0) != 0) unsupported(c.node(), "output Indices other than 2-D without ceil_mode");
  const Window win = window_of(c, x, c.attr_ints("kernel_shape"));
  if (!symmetric(win)) unsupported(c.node(), "output Indices with asymmetric padding");
  const auto [y, idx] = max_pool2d_with_indices(x, Size2{win.kernel[0], win.kernel[1]}, Size2{win.stride[0], win.stride[1]},
                                                Size2{win.pad_begin[0], win.pad_begin[1]}, Size2{win.dilation[0], win.dilation[1]});
  const int64_t n = x.size(0), ch = x.size(1), h = x.size(2), w = x.size(3);
  Tensor within = idx;
  if (c.attr_i("storage_order", 0) == 1) within = add(mul(remainder(idx, w), h), floor_divide(idx, w));
  const Tensor plane = mul(arange(n * ch, DType::i64, x.device()).reshape({n, ch, 1, 1}), h * w);
  return Out{y, add(within, plane)};
}
}  // namespace

Tensor conv_node(const Ctx& c) { return conv(c); }

void register_nn_ops(OpTable& t) {
  t["MatMul"] = {[](const Ctx& c) { return Out{matmul(c.in(0), c.in(1))}; }, {}};
  t["Gemm"] = {[](const Ctx& c) {
                 Tensor a = c.in(0), b = c.in(1);
                 if (c.attr_i("transA", 0)) a = a.mT();
                 if (c.attr_i("transB", 0)) b = b.mT();
                 Tensor y = matmul(a, b);
                 const double alpha = c.attr_f("alpha", 1.0), beta = c.attr_f("beta", 1.0);
                 if (alpha != 1.0) y = mul(y, alpha);
                 if (c.has(2)) y = add(y, beta == 1.0 ? c.in(2) : mul(c.in(2), beta));
                 return Out{y.to(c.in(0).dtype())};
               },
               {}};
  t["Conv"] = {[](const Ctx& c) { return Out{conv(c)}; }, {}};
  t["MaxPool"] = {[](const Ctx& c) {
                    if (c.node().output_size() > 1 && !c.node().output(1).empty()) return max_pool_with_indices(c);
                    return Out{pool(c, true)};
                  },
                  {}};
  t["AveragePool"] = {[](const Ctx& c) { return Out{pool(c, false)}; }, {}};
  t["GlobalAveragePool"] = {[](const Ctx& c) {
                              const Tensor x = c.in(0);
                              Axes axes;
                              for (int64_t d = 2; d < x.dim(); ++d) axes.push_back(d);
                              return Out{mean(x, axes, true)};
                            },
                            {}};
  t["GlobalMaxPool"] = {[](const Ctx& c) {
                          const Tensor x = c.in(0);
                          Axes axes;
                          for (int64_t d = 2; d < x.dim(); ++d) axes.push_back(d);
                          return Out{amax(x, axes, true)};
                        },
                        {}};
  // Inference, or training_mode=1: normalised by the batch's own mean and (population)
  // variance over every axis but 1, with the running statistics updated by `momentum`.
  t["BatchNormalization"] = {[](const Ctx& c) {
                               const Tensor x = c.in(0);
                               Shape s(static_cast<size_t>(x.dim()), 1);
                               s[1] = x.size(1);
                               const auto p = [&](size_t i) { return c.in(i).reshape(s).to(x.dtype()); };
                               const double eps = c.attr_f("epsilon", 1e-5);
                               if (c.attr_i("training_mode", 0) == 0) {
                                 return Out{add(mul(mul(sub(x, p(3)), rsqrt(add(p(4), eps))), p(1)), p(2))};
                               }
                               Axes axes;
                               for (int64_t d = 0; d < x.dim(); ++d) {
                                 if (d != 1) axes.push_back(d);
                               }
                               const Tensor m = mean(x, axes, true), v = var(x, axes, 0, true);
                               const Tensor y = add(mul(mul(sub(x, m), rsqrt(add(v, eps))), p(1)), p(2));
                               const double mom = c.attr_f("momentum", 0.9);
                               const auto running = [&](size_t i, const Tensor& batch) {
                                 return add(mul(c.in(i), mom), mul(batch.reshape(c.in(i).shape()).to(c.in(i).dtype()), 1.0 - mom));
                               };
                               return Out{y, running(3, m), running(4, v)};
                             },
                             [](const ::onnx::NodeProto& n, int64_t) {
                               bool training = false;
                               for (const auto& a : n.attribute()) training |= a.name() == "training_mode" && a.i() != 0;
                               if (!training && n.output_size() > 1)
                                 unsupported(n, "training outputs (running mean and variance) without training_mode");
                             }};
  t["LayerNormalization"] = {[](const Ctx& c) {
                               const Tensor x = c.in(0);
                               const int64_t a = axis_of(c.attr_i("axis", -1), x.dim(), c.node());
                               Axes axes;
                               for (int64_t d = a; d < x.dim(); ++d) axes.push_back(d);
                               const Tensor xf = x.to(is_floating(x.dtype()) && x.dtype() != DType::f64 ? DType::f32 : x.dtype());
                               const Tensor m = mean(xf, axes, true);
                               const Tensor inv = rsqrt(add(var(xf, axes, 0, true), c.attr_f("epsilon", 1e-5)));
                               Tensor y = mul(mul(sub(xf, m), inv), c.in(1));
                               if (c.has(2)) y = add(y, c.in(2));
                               return Out{y.to(x.dtype()), m, inv};
                             },
                             {}};
  // InstanceNormalization(input, scale, B): PyTorch also exports GroupNorm through it (reshaped
  // to one "instance" per group), so diffusion UNets import through this one op.
  t["InstanceNormalization"] = {[](const Ctx& c) {
                                  const Tensor x = c.in(0);
                                  return Out{instance_norm(x, c.in(1).to(x.dtype()), c.in(2).to(x.dtype()), c.attr_f("epsilon", 1e-5)).to(x.dtype())};
                                },
                                {}};
  t["Softmax"] = {[](const Ctx& c) { return Out{softmax_like(c, &softmax)}; }, {}};
  t["LogSoftmax"] = {[](const Ctx& c) { return Out{softmax_like(c, &log_softmax)}; }, {}};
  t["Hardmax"] = {[](const Ctx& c) { return Out{softmax_like(c, &hardmax_2d)}; }, {}};
  reduce(t, "ReduceSum", 13, &r_sum);
  reduce(t, "ReduceMean", 18, &r_mean);
  reduce(t, "ReduceMax", 18, &r_max);
  reduce(t, "ReduceMin", 18, &r_min);
  reduce(t, "ReduceProd", 18, &r_prod);
  reduce(t, "ReduceL1", 18, &r_l1);
  reduce(t, "ReduceL2", 18, &r_l2);
  reduce(t, "ReduceSumSquare", 18, &r_sumsq);
  reduce(t, "ReduceLogSum", 18, &r_logsum);
  reduce(t, "ReduceLogSumExp", 18, &r_logsumexp);
  t["TopK"] = {[](const Ctx& c) {
                 const Tensor x = c.in(0);
                 const int64_t k = c.opset() >= 10 ? static_cast<int64_t>(c.scalar(1)) : c.attr_i("k", 1);
                 const ValuesIndices r = topk(x, k, axis_of(c.attr_i("axis", -1), x.dim(), c.node()), c.attr_i("largest", 1) != 0);
                 return Out{r.values, r.indices};
               },
               {}};
  t["ArgMax"] = {[](const Ctx& c) { return Out{arg_extreme(c, true)}; }, {}};
  t["ArgMin"] = {[](const Ctx& c) { return Out{arg_extreme(c, false)}; }, {}};
  t["CumSum"] = {[](const Ctx& c) {
                   Tensor x = c.in(0);
                   const int64_t a = axis_of(static_cast<int64_t>(c.scalar(1)), x.dim(), c.node());
                   const bool rev = c.attr_i("reverse", 0) != 0, excl = c.attr_i("exclusive", 0) != 0;
                   if (rev) x = reversed(x, a);
                   Tensor y = cumsum(x, a);
                   if (excl) y = sub(y, x);
                   if (rev) y = reversed(y, a);
                   return Out{y.to(c.in(0).dtype())};
                 },
                 {}};
  // Dropout runs as inference. training_mode true with ratio 0 is the identity too; other
  // training-mode Dropout is refused when the model loads if the flag is a constant
  // (refuse_training_dropout, model.cpp), here only when it is a graph input.
  t["Dropout"] = {[](const Ctx& c) {
                    const double ratio = c.has(1) ? c.scalar(1) : 0.5;
                    if (c.has(2) && c.scalar(2) != 0 && ratio != 0) {
                      throw Unsupported("onnx: Dropout in training mode (training_mode true, ratio " + std::to_string(ratio) + ") is not supported");
                    }
                    const Tensor x = c.in(0);
                    return Out{x, ones(x.shape(), DType::boolean, x.device())};
                  },
                  {}};
}

}  // namespace tessera::onnx
