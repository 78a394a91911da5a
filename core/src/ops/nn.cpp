// Front-ends of the nn kernels: checks, output shapes, and autograd records whose backward
// calls the dedicated backward kernels (conv, pooling, normalisation) or public ops.
#include "tessera/ops/nn.h"

#include <cmath>

#include "autograd/record.h"
#include "conv_internal.h"
#include "dispatch.h"
#include "tessera/autocast.h"
#include "tessera/graph.h"
#include "tessera/runtime.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/indexing.h"
#include "tessera/ops/reduction.h"
#include "tessera/ops/shape_ops.h"

namespace tessera {

namespace {
using detail::run_kernel;

// (in + 2p - d(k - 1) - 1) / s + 1 in 128-bit arithmetic: with sizes from the user the int64
// expression can overflow (UB, and a wrapped size). A window that does not fit gives 0 (C++
// division truncates toward zero, which would turn -1 / 2 into a size of 1).
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, const char* op = "conv2d") {
  const __int128 span = static_cast<__int128>(in) + 2 * static_cast<__int128>(p) - static_cast<__int128>(d) * (k - 1) - 1;
  if (span < 0) return 0;
  const __int128 n = span / s + 1;
  TESSERA_CHECK(n <= INT64_MAX, op, "output size overflows int64 (input ", in, ", kernel ", k, ", padding ", p, ")");
  return static_cast<int64_t>(n);
}

// Strides, paddings, dilations and kernel sizes are bounded (2^20) so the kernels' index
// arithmetic (in + 2p, d * (k - 1), ...) cannot overflow int64 for any tensor that fits in memory.
constexpr int64_t kMaxWindowParam = int64_t{1} << 20;
void check_size2(Size2 v, int64_t min, const char* op, const char* what) {
  TESSERA_CHECK(v[0] >= min && v[1] >= min && v[0] <= kMaxWindowParam && v[1] <= kMaxWindowParam, op, what, " must be in [", min,
                ", 2^20], got [", v[0], ", ", v[1], "]");
}

}  // namespace

namespace detail {
OpAttrs conv_attrs(const Tensor& weight, Size2 stride, Size2 padding, Size2 dilation, int64_t groups) {
  OpAttrs attrs;
  attrs.kernel = {weight.size(2), weight.size(3)};
  attrs.stride = stride;
  attrs.padding = padding;
  attrs.dilation = dilation;
  attrs.groups = groups;
  return attrs;
}
Tensor conv_input_grad(const Tensor& g, const Tensor& w, const Shape& x_shape, const OpAttrs& a) {
  Tensor gx = empty(x_shape, g.dtype(), g.device());
  const Tensor in[2] = {g.contiguous(), w.contiguous()};
  run_kernel(OpId::Conv2dInputGrad, g.device(), in, std::span<Tensor>(&gx, 1), a);
  return gx;
}
Tensor conv_weight_grad(const Tensor& g, const Tensor& x, const Shape& w_shape, const OpAttrs& a) {
  Tensor gw = empty(w_shape, g.dtype(), g.device());
  const Tensor in[2] = {g.contiguous(), x.contiguous()};
  run_kernel(OpId::Conv2dWeightGrad, g.device(), in, std::span<Tensor>(&gw, 1), a);
  return gw;
}
}  // namespace detail
using detail::conv_input_grad;
using detail::conv_weight_grad;

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, Size2 stride, Size2 padding, Size2 dilation,
              int64_t groups) {
  const Tensor x = autocast(x_in, CastPolicy::lower), weight = autocast(weight_in, CastPolicy::lower),
               bias = autocast(bias_in, CastPolicy::lower);
  detail::check_defined(x, "conv2d", "input");
  detail::check_defined(weight, "conv2d", "weight");
  const Device device = detail::common_device({&x, &weight, &bias}, "conv2d");
  TESSERA_CHECK(x.dim() == 4, "conv2d", "input must be [N, C, H, W], got ", shape_str(x.shape()));
  TESSERA_CHECK(weight.dim() == 4, "conv2d", "weight must be [O, C/groups, kh, kw], got ", shape_str(weight.shape()));
  TESSERA_CHECK(groups >= 1 && x.size(1) % groups == 0 && weight.size(0) % groups == 0, "conv2d", "groups ", groups,
                " must divide input channels ", x.size(1), " and output channels ", weight.size(0));
  TESSERA_CHECK(weight.size(1) * groups == x.size(1), "conv2d", "weight ", shape_str(weight.shape()), " expects ",
                weight.size(1) * groups, " input channels, input ", shape_str(x.shape()), " has ", x.size(1));
  TESSERA_CHECK(x.dtype() == weight.dtype() && is_floating(x.dtype()), "conv2d", "input and weight must share a floating dtype, got ",
                x.dtype(), " and ", weight.dtype());
  check_size2(stride, 1, "conv2d", "stride");
  check_size2(padding, 0, "conv2d", "padding");
  check_size2(dilation, 1, "conv2d", "dilation");
  if (bias.defined()) {
    TESSERA_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0) && bias.dtype() == x.dtype(), "conv2d", "bias ",
                  shape_str(bias.shape()), " does not match ", weight.size(0), " output channels");
  }
  const int64_t ho = out_size(x.size(2), weight.size(2), stride[0], padding[0], dilation[0]);
  const int64_t wo = out_size(x.size(3), weight.size(3), stride[1], padding[1], dilation[1]);
  TESSERA_CHECK(ho > 0 && wo > 0, "conv2d", "input ", shape_str(x.shape()), " is smaller than the kernel ",
                shape_str(weight.shape()), " with this padding/dilation");
  const OpAttrs attrs = detail::conv_attrs(weight, stride, padding, dilation, groups);
  Tensor out = empty({x.size(0), weight.size(0), ho, wo}, x.dtype(), device);
  const Tensor in[3] = {x.detach().contiguous(), weight.detach().contiguous(), bias.defined() ? bias.detach().contiguous() : Tensor()};
  if (out.numel() > 0) run_kernel(OpId::Conv2d, device, in, std::span<Tensor>(&out, 1), attrs);
  if (autograd::needs_grad({&x, &weight, &bias})) {
    autograd::record("conv2d", {x, weight, bias}, out,
                     [xs = in[0], ws = in[1], attrs, want_x = autograd::wants_grad(x), want_w = autograd::wants_grad(weight),
                      want_b = autograd::wants_grad(bias)](const Tensor& g_in) {
                       const Tensor g = want_x && want_w ? g_in.contiguous() : g_in;  // once for both kernels
                       return std::vector<Tensor>{want_x ? conv_input_grad(g, ws, xs.shape(), attrs) : Tensor(),
                                                  want_w ? conv_weight_grad(g, xs, ws.shape(), attrs) : Tensor(),
                                                  want_b ? sum(g, {0, 2, 3}) : Tensor()};
                     });
  }
  return out;
}

namespace {
OpAttrs pool_attrs(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding, Size2 dilation, const char* op) {
  detail::check_defined(x, op);
  TESSERA_CHECK(x.dim() == 4, op, "input must be [N, C, H, W], got ", shape_str(x.shape()));
  TESSERA_CHECK(is_floating(x.dtype()), op, "expected a floating dtype, got ", x.dtype());
  OpAttrs a;
  a.kernel = kernel;
  a.stride = stride.value_or(kernel);
  a.padding = padding;
  a.dilation = dilation;
  check_size2(a.kernel, 1, op, "kernel");
  check_size2(a.stride, 1, op, "stride");
  check_size2(a.dilation, 1, op, "dilation");
  TESSERA_CHECK(padding[0] >= 0 && padding[1] >= 0 && padding[0] <= kernel[0] / 2 && padding[1] <= kernel[1] / 2, op,
                "padding must be between 0 and half the kernel, got [", padding[0], ", ", padding[1], "]");
  return a;
}
Shape pool_shape(const Tensor& x, const OpAttrs& a, const char* op) {
  const int64_t ho = out_size(x.size(2), a.kernel[0], a.stride[0], a.padding[0], a.dilation[0], op);
  const int64_t wo = out_size(x.size(3), a.kernel[1], a.stride[1], a.padding[1], a.dilation[1], op);
  TESSERA_CHECK(ho > 0 && wo > 0, op, "input ", shape_str(x.shape()), " is smaller than the pooling window");
  return {x.size(0), x.size(1), ho, wo};
}
}  // namespace

namespace {
// want_indices: the caller returns them; the backward needs them too. Without either the
// kernel skips them (8 bytes per output, more than the output itself for f32).
std::pair<Tensor, Tensor> max_pool2d_impl(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding, Size2 dilation,
                                          bool want_indices) {
  const OpAttrs a = pool_attrs(x, kernel, stride, padding, dilation, "max_pool2d");
  const Shape shape = pool_shape(x, a, "max_pool2d");
  const bool indices = want_indices || autograd::needs_grad({&x});
  Tensor outs[2] = {empty(shape, x.dtype(), x.device()), indices ? empty(shape, DType::i64, x.device()) : Tensor()};
  const Tensor in = x.detach().contiguous();
  if (outs[0].numel() > 0) run_kernel(OpId::MaxPool2d, x.device(), std::span<const Tensor>(&in, 1), outs, a);
  if (autograd::needs_grad({&x})) {
    autograd::record("max_pool2d", {x}, outs[0], [idx = outs[1], xshape = x.shape(), a](const Tensor& g) {
      Tensor gx = empty(xshape, g.dtype(), g.device());
      const Tensor in2[2] = {g.contiguous(), idx};
      detail::run_kernel(OpId::MaxPool2dBackward, g.device(), in2, std::span<Tensor>(&gx, 1), a);
      return std::vector<Tensor>{gx};
    });
  }
  return {outs[0], outs[1]};
}
}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding,
                                                  Size2 dilation) {
  return max_pool2d_impl(x, kernel, stride, padding, dilation, true);
}

Tensor max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding, Size2 dilation) {
  return max_pool2d_impl(x, kernel, stride, padding, dilation, false).first;
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding, bool count_include_pad) {
  OpAttrs a = pool_attrs(x, kernel, stride, padding, {1, 1}, "avg_pool2d");
  a.flag = count_include_pad;
  Tensor out = empty(pool_shape(x, a, "avg_pool2d"), x.dtype(), x.device());
  const Tensor in = x.detach().contiguous();
  if (out.numel() > 0) run_kernel(OpId::AvgPool2d, x.device(), std::span<const Tensor>(&in, 1), std::span<Tensor>(&out, 1), a);
  if (autograd::needs_grad({&x})) {
    autograd::record("avg_pool2d", {x}, out, [xshape = x.shape(), a](const Tensor& g) {
      Tensor gx = empty(xshape, g.dtype(), g.device());
      const Tensor gc = g.contiguous();
      detail::run_kernel(OpId::AvgPool2dBackward, g.device(), std::span<const Tensor>(&gc, 1), std::span<Tensor>(&gx, 1), a);
      return std::vector<Tensor>{gx};
    });
  }
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size) {
  detail::check_defined(x, "adaptive_avg_pool2d");
  TESSERA_CHECK(x.dim() == 4, "adaptive_avg_pool2d", "input must be [N, C, H, W], got ", shape_str(x.shape()));
  check_size2(output_size, 1, "adaptive_avg_pool2d", "output size");
  const int64_t h = x.size(2), w = x.size(3), oh = output_size[0], ow = output_size[1];
  if (oh == 1 && ow == 1) return mean(x, {2, 3}, true);
  if (h % oh == 0 && w % ow == 0) return avg_pool2d(x, {h / oh, w / ow});
  // Uneven windows: window i covers [floor(i * H / oh), ceil((i + 1) * H / oh)), one op per
  // window -- bounded, so a huge output size is an error rather than a loop that never ends.
  checked_numel({x.size(0), x.size(1), oh, ow}, "adaptive_avg_pool2d");
  TESSERA_CHECK(oh <= (int64_t{1} << 12) && ow <= (int64_t{1} << 12), "adaptive_avg_pool2d", "output size [", oh, ", ", ow,
                "] with uneven windows over ", shape_str(x.shape()), ": at most 4096 per axis");
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < oh; ++i) {
    const int64_t h0 = i * h / oh, h1 = ((i + 1) * h + oh - 1) / oh;  // h is a real size (< 2^40): no overflow
    std::vector<Tensor> cols;
    for (int64_t j = 0; j < ow; ++j) {
      const int64_t w0 = j * w / ow, w1 = ((j + 1) * w + ow - 1) / ow;
      cols.push_back(mean(x.narrow(2, h0, h1 - h0).narrow(3, w0, w1 - w0), {2, 3}));
    }
    rows.push_back(stack(cols, -1));
  }
  return stack(rows, -2);
}

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight_in,
                  const Tensor& bias_in, bool training, double momentum, double eps) {
  const Tensor x = autocast(x_in, CastPolicy::f32), weight = autocast(weight_in, CastPolicy::f32),
               bias = autocast(bias_in, CastPolicy::f32);
  detail::check_defined(x, "batch_norm");
  TESSERA_CHECK(x.dim() >= 2, "batch_norm", "input must be [N, C, ...], got ", shape_str(x.shape()));
  TESSERA_CHECK(is_floating(x.dtype()), "batch_norm", "expected a floating dtype, got ", x.dtype());
  const int64_t c = x.size(1);
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias}) {
    TESSERA_CHECK(!t->defined() || (t->dim() == 1 && t->size(0) == c), "batch_norm", "parameter ", shape_str(t->shape()),
                  " does not match ", c, " channels of ", shape_str(x.shape()));
  }
  Shape bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = c;
  if (!training) {
    TESSERA_CHECK(running_mean.defined() && running_var.defined(), "batch_norm", "eval mode needs running statistics");
    Tensor y = mul(sub(x, running_mean.reshape(bshape)), rsqrt(add(running_var.reshape(bshape), eps)));
    if (weight.defined()) y = mul(y, weight.reshape(bshape));
    if (bias.defined()) y = add(y, bias.reshape(bshape));
    return y;
  }
  const int64_t n = x.size(0), spatial = x.numel() / std::max<int64_t>(n * c, 1);
  TESSERA_CHECK(n * spatial > 1, "batch_norm", "expected more than one value per channel in training, got input ",
                shape_str(x.shape()));
  const Tensor x3 = x.detach().contiguous().view({n, c, spatial});
  OpAttrs attrs;
  attrs.scalar = eps;
  const DType stat_dt = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor outs[3] = {empty(x3.shape(), x.dtype(), x.device()), empty({c}, stat_dt, x.device()), empty({c}, stat_dt, x.device())};
  const Tensor in[3] = {x3, weight.defined() ? weight.detach() : Tensor(), bias.defined() ? bias.detach() : Tensor()};
  run_kernel(OpId::BatchNorm, x.device(), in, outs, attrs);
  if (running_mean.defined() && running_var.defined()) {
    NoGradGuard no_grad;
    const double m = static_cast<double>(n * spatial);
    const Tensor batch_var = sub(reciprocal(square(outs[2])), eps);
    Tensor rm = running_mean, rv = running_var;
    rm.copy_(add(mul(rm, 1 - momentum), mul(outs[1], momentum)));
    rv.copy_(add(mul(rv, 1 - momentum), mul(batch_var, momentum * m / (m - 1))));
  }
  Tensor y = outs[0].view(x.shape());
  if (autograd::needs_grad({&x, &weight, &bias})) {
    autograd::record("batch_norm", {x, weight, bias}, y,
                     [x3, w = weight.defined() ? weight.detach() : Tensor(), mean = outs[1], invstd = outs[2],
                      has_w = weight.defined(), has_b = bias.defined(), xshape = x.shape()](const Tensor& g) {
                       Tensor grads[3] = {empty(x3.shape(), g.dtype(), g.device()), empty({x3.size(1)}, g.dtype(), g.device()),
                                          empty({x3.size(1)}, g.dtype(), g.device())};
                       const Tensor in2[5] = {g.contiguous().view(x3.shape()), x3, w, mean, invstd};
                       detail::run_kernel(OpId::BatchNormBackward, g.device(), in2, grads, OpAttrs{});
                       return std::vector<Tensor>{grads[0].view(xshape), has_w ? grads[1] : Tensor(), has_b ? grads[2] : Tensor()};
                     });
  }
  return y;
}

Tensor layer_norm(const Tensor& x_in, int64_t normalized_dims, const Tensor& weight_in, const Tensor& bias_in, double eps) {
  const Tensor x = autocast(x_in, CastPolicy::f32), weight = autocast(weight_in, CastPolicy::f32),
               bias = autocast(bias_in, CastPolicy::f32);
  detail::check_defined(x, "layer_norm");
  TESSERA_CHECK(normalized_dims >= 1 && normalized_dims <= x.dim(), "layer_norm", "cannot normalise the last ",
                normalized_dims, " axes of ", shape_str(x.shape()));
  TESSERA_CHECK(is_floating(x.dtype()), "layer_norm", "expected a floating dtype, got ", x.dtype());
  const Shape norm_shape(x.shape().end() - normalized_dims, x.shape().end());
  for (const Tensor* t : {&weight, &bias}) {
    TESSERA_CHECK(!t->defined() || t->shape() == norm_shape, "layer_norm", "parameter ", shape_str(t->shape()),
                  " does not match normalized shape ", shape_str(norm_shape));
  }
  const int64_t d = numel(norm_shape), m = d ? x.numel() / d : 0;
  const Tensor x2 = x.detach().contiguous().view({m, d});
  OpAttrs attrs;
  attrs.scalar = eps;
  const DType stat_dt = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor outs[3] = {empty({m, d}, x.dtype(), x.device()), empty({m}, stat_dt, x.device()), empty({m}, stat_dt, x.device())};
  const Tensor in[3] = {x2, weight.defined() ? weight.detach().reshape({d}) : Tensor(), bias.defined() ? bias.detach().reshape({d}) : Tensor()};
  if (x.numel() > 0) run_kernel(OpId::LayerNorm, x.device(), in, outs, attrs);
  Tensor y = outs[0].view(x.shape());
  if (autograd::needs_grad({&x, &weight, &bias})) {
    autograd::record("layer_norm", {x, weight, bias}, y,
                     [x2, w = in[1], mean = outs[1], rstd = outs[2], has_w = weight.defined(), has_b = bias.defined(),
                      xshape = x.shape(), norm_shape](const Tensor& g) {
                       const int64_t dd = x2.size(1);
                       Tensor grads[3] = {empty(x2.shape(), g.dtype(), g.device()), empty({dd}, g.dtype(), g.device()),
                                          empty({dd}, g.dtype(), g.device())};
                       const Tensor in2[5] = {g.contiguous().view(x2.shape()), x2, w, mean, rstd};
                       detail::run_kernel(OpId::LayerNormBackward, g.device(), in2, grads, OpAttrs{});
                       return std::vector<Tensor>{grads[0].view(xshape), has_w ? grads[1].view(norm_shape) : Tensor(),
                                                  has_b ? grads[2].view(norm_shape) : Tensor()};
                     });
  }
  return y;
}

namespace {
Tensor reduce_loss(const Tensor& per_item, Reduction reduction, const Tensor& count = Tensor()) {
  switch (reduction) {
    case Reduction::none: return per_item;
    case Reduction::sum: return sum(per_item);
    case Reduction::mean: return count.defined() ? div(sum(per_item), count) : mean(per_item);
  }
  return per_item;
}

// [N, C, d...] -> [N * d..., C] and targets to match.
std::pair<Tensor, Tensor> flatten_classes(const Tensor& logits, const Tensor& target, const char* op) {
  detail::check_defined(logits, op, "input");
  detail::check_index_dtype(target, op, "target");
  TESSERA_CHECK(logits.dim() >= 2, op, "input must be [N, C, ...], got ", shape_str(logits.shape()));
  detail::common_device({&logits, &target}, op);
  Shape want = logits.shape();
  want.erase(want.begin() + 1);
  TESSERA_CHECK(target.shape() == want, op, "target ", shape_str(target.shape()), " does not match input ",
                shape_str(logits.shape()), " (expected ", shape_str(want), ")");
  if (logits.dim() == 2) return {logits, target};
  std::vector<int64_t> order = {0};
  for (int64_t d = 2; d < logits.dim(); ++d) order.push_back(d);
  order.push_back(1);
  return {logits.permute(order).reshape({-1, logits.size(1)}), target.reshape({-1})};
}
}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target_in, Reduction reduction, double label_smoothing,
                     int64_t ignore_index) {
  if (target_in.defined() && is_floating(target_in.dtype())) {  // class probabilities
    return cross_entropy(logits_in, target_in, Tensor(), reduction, label_smoothing, ignore_index);
  }
  auto [logits, target] = flatten_classes(autocast(logits_in, CastPolicy::f32), target_in, "cross_entropy");
  TESSERA_CHECK(is_floating(logits.dtype()), "cross_entropy", "expected floating logits, got ", logits.dtype());
  TESSERA_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy", "label_smoothing must be in [0, 1], got ",
                label_smoothing);
  const int64_t n = logits.size(0), c = logits.size(1);
  OpAttrs attrs;
  attrs.scalar = label_smoothing;
  attrs.axis = ignore_index;
  Tensor outs[2] = {empty({n}, logits.dtype(), logits.device()), empty({n, c}, logits.dtype(), logits.device())};
  const Tensor in[2] = {logits.detach().contiguous(), target.contiguous()};
  if (n > 0) run_kernel(OpId::CrossEntropy, logits.device(), in, outs, attrs);
  Tensor loss = outs[0];
  if (autograd::needs_grad({&logits})) {
    autograd::record("cross_entropy", {logits}, loss, [logp = outs[1], t = in[1], label_smoothing, ignore_index, c, attrs](const Tensor& g) {
      // d loss / d logits = softmax - smoothed one-hot target, zero on ignored rows.
      if (fused_kernels()) {
        Tensor grad = empty(logp.shape(), logp.dtype(), logp.device());
        const Tensor in3[3] = {g.to(logp.dtype()).contiguous(), logp, t};
        if (grad.numel() > 0) detail::run_kernel(OpId::CrossEntropyBackward, logp.device(), in3, std::span<Tensor>(&grad, 1), attrs);
        return std::vector<Tensor>{grad};
      }
      const Tensor classes = arange(c, t.dtype(), t.device());
      const Tensor hot = eq(t.unsqueeze(1), classes).to(logp.dtype());
      const Tensor target_dist = add(mul(hot, 1.0 - label_smoothing), label_smoothing / static_cast<double>(c));
      const Tensor keep = ne(t, ignore_index).to(logp.dtype()).unsqueeze(1);
      return std::vector<Tensor>{mul(mul(sub(exp(logp), target_dist), keep), g.unsqueeze(1))};
    });
  }
  if (logits_in.dim() > 2 && reduction == Reduction::none) {
    Shape shape = logits_in.shape();
    shape.erase(shape.begin() + 1);
    loss = loss.reshape(shape);
  }
  const Tensor count = reduction == Reduction::mean ? sum(ne(target, ignore_index)).to(logits.dtype()) : Tensor();
  return reduce_loss(loss, reduction, count);
}

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& target_in, Reduction reduction, int64_t ignore_index) {
  auto [log_probs, target] = flatten_classes(autocast(log_probs_in, CastPolicy::f32), target_in, "nll_loss");
  const int64_t c = log_probs.size(1);
  const Tensor keep = ne(target, ignore_index);
  if (target.numel() > 0) {
    const int64_t lo = amin(where(keep, target, 0)).item<int64_t>(), hi = amax(where(keep, target, 0)).item<int64_t>();
    TESSERA_CHECK(lo >= 0 && hi < c, "nll_loss", "targets must lie in [0, ", c, "), got range [", lo, ", ", hi, "]");
  }
  const Tensor safe = where(keep, target, 0).unsqueeze(1);
  const Tensor picked = neg(take_along_axis(log_probs, safe, 1).squeeze(1));
  const Tensor per_item = mul(picked, keep.to(log_probs.dtype()));
  const Tensor count = reduction == Reduction::mean ? sum(keep).to(log_probs.dtype()) : Tensor();
  return reduce_loss(per_item, reduction, count);
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const Tensor input = autocast(input_in, CastPolicy::f32), target = autocast(target_in, CastPolicy::f32);
  TESSERA_CHECK(input.shape() == target.shape(), "mse_loss", "input ", shape_str(input.shape()), " and target ",
                shape_str(target.shape()), " differ");
  return reduce_loss(square(sub(input, target)), reduction);
}

Tensor l1_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const Tensor input = autocast(input_in, CastPolicy::f32), target = autocast(target_in, CastPolicy::f32);
  TESSERA_CHECK(input.shape() == target.shape(), "l1_loss", "input ", shape_str(input.shape()), " and target ",
                shape_str(target.shape()), " differ");
  return reduce_loss(abs(sub(input, target)), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits_in, const Tensor& target_in, Reduction reduction,
                                        const Tensor& pos_weight_in) {
  const Tensor logits = autocast(logits_in, CastPolicy::f32), target = autocast(target_in, CastPolicy::f32),
               pos_weight = autocast(pos_weight_in, CastPolicy::f32);
  TESSERA_CHECK(logits.shape() == target.shape(), "binary_cross_entropy_with_logits", "input ", shape_str(logits.shape()),
                " and target ", shape_str(target.shape()), " differ");
  // loss = (1 - t) x + w_t * softplus(-x), with w_t = 1 + (pos_weight - 1) t; softplus is stable.
  const Tensor sp = softplus(neg(logits));
  const Tensor weight_t = pos_weight.defined() ? add(mul(sub(pos_weight, 1.0), target), 1.0) : Tensor();
  const Tensor pos_term = weight_t.defined() ? mul(weight_t, sp) : sp;
  return reduce_loss(add(mul(sub(1.0, target), logits), pos_term), reduction);
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) { return dropout_add(x, Tensor(), p, training, gen); }

namespace {
// out = residual + mask(seed, offset) * x / (1 - p), one kernel.
Tensor run_dropout_add(const Tensor& x, const Tensor& residual, double p, uint64_t seed, uint64_t offset) {
  OpAttrs attrs;
  attrs.scalar = p;
  attrs.seed = seed;
  attrs.offset = offset;
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  const Tensor in[2] = {x.contiguous(), residual.defined() ? residual.contiguous() : Tensor()};
  if (out.numel() > 0) detail::run_kernel(OpId::DropoutAdd, x.device(), in, std::span<Tensor>(&out, 1), attrs);
  return out;
}
}  // namespace

Tensor dropout_add(const Tensor& x, const Tensor& residual, double p, bool training, Generator* gen) {
  detail::check_defined(x, "dropout");
  TESSERA_CHECK(p >= 0 && p <= 1, "dropout", "p must be in [0, 1], got ", p);
  TESSERA_CHECK(is_floating(x.dtype()), "dropout", "expected a floating dtype, got ", x.dtype());
  if (residual.defined()) {
    TESSERA_CHECK(residual.shape() == x.shape() && is_floating(residual.dtype()), "dropout_add", "residual ", shape_str(residual.shape()), " ",
                  residual.dtype(), " does not match input ", shape_str(x.shape()), " ", x.dtype());
    detail::common_device({&x, &residual}, "dropout_add");
    // Mixed precision: a bf16 sublayer output added to an f32 residual stream is computed in the
    // promoted dtype, as `residual + dropout(x)` would be (the residual stream stays f32).
    if (residual.dtype() != x.dtype()) {
      const DType t = promote_types(x.dtype(), residual.dtype());
      return dropout_add(x.to(t), residual.to(t), p, training, gen);
    }
  }
  const auto plus_residual = [&](const Tensor& y) { return residual.defined() ? add(residual, y) : y; };
  if (!training || p == 0) return plus_residual(x);
  if (p == 1) return plus_residual(mul(x, 0.0));
  if (!fused_kernels()) {  // the reference composition: a stored mask and two multiplies
    const Tensor mask = bernoulli(x.shape(), 1.0 - p, x.dtype(), x.device(), gen);
    return plus_residual(mul(x, mul(mask, 1.0 / (1.0 - p))));
  }
  Generator& g = gen ? *gen : default_generator();
  const uint64_t seed = g.seed(), offset = g.next_offset();
  TESSERA_CHECK(!detail::graph_capturing(), "dropout", "random ops cannot be captured in a graph (their Philox seed and offset are launch "
                "arguments: every replay would draw the same numbers)");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = run_dropout_add(x.detach(), residual.defined() ? residual.detach() : Tensor(), p, seed, offset);
  }
  if (autograd::needs_grad({&x, &residual})) {
    autograd::record("dropout_add", {x, residual}, out, [p, seed, offset, has_residual = residual.defined()](const Tensor& g) {
      return std::vector<Tensor>{run_dropout_add(g, Tensor(), p, seed, offset), has_residual ? g : Tensor()};
    });
  }
  return out;
}

}  // namespace tessera
