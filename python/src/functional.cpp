// tessera.nn.functional: convolution, pooling, normalisation, losses, dropout and attention,
// with torch.nn.functional's argument names and defaults.
#include "bindings.h"

namespace tessera::python {
namespace {

Size2 size2(const py::object& v) {
  if (py::isinstance<py::int_>(v)) {
    const auto x = v.cast<int64_t>();
    return {x, x};
  }
  const auto s = v.cast<std::vector<int64_t>>();
  TESSERA_CHECK(s.size() == 2, "nn.functional", "expected an int or a pair, got ", s.size(), " values");
  return {s[0], s[1]};
}
Size3 size3(const py::object& v) {
  if (py::isinstance<py::int_>(v)) {
    const auto x = v.cast<int64_t>();
    return {x, x, x};
  }
  const auto s = v.cast<std::vector<int64_t>>();
  TESSERA_CHECK(s.size() == 3, "conv3d", "expected an int or a triple, got ", s.size(), " values");
  return {s[0], s[1], s[2]};
}
Tensor opt(const std::optional<Tensor>& t) { return t ? *t : Tensor(); }
std::optional<Size2> opt_size2(const py::object& v) { return v.is_none() ? std::nullopt : std::optional<Size2>(size2(v)); }

}  // namespace

void bind_nn_functional(py::module_& m) {
  using OT = std::optional<Tensor>;
  m.def(
      "linear", [](const Tensor& x, const Tensor& w, const OT& b) { return linear(x, w, opt(b)); }, py::arg("input"), py::arg("weight"),
      py::arg("bias") = py::none(), nogil());
  m.def(
      "conv2d",
      [](const Tensor& x, const Tensor& w, const OT& b, const py::object& stride, const py::object& padding, const py::object& dilation,
         int64_t groups) {
        const Size2 s = size2(stride), d = size2(dilation);
        if (py::isinstance<py::str>(padding)) {
          const std::string p = padding.cast<std::string>();
          TESSERA_CHECK(p == "same" || p == "valid", "conv2d", "padding must be 'same', 'valid', an int or a pair, got '", p, "'");
          py::gil_scoped_release nogil;
          return conv2d(x, w, opt(b), s, p == "same" ? PaddingMode::same : PaddingMode::valid, d, groups);
        }
        const Size2 p = size2(padding);
        py::gil_scoped_release nogil;
        return conv2d(x, w, opt(b), s, p, d, groups);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1, py::arg("padding") = 0,
      py::arg("dilation") = 1, py::arg("groups") = 1);
  m.def(
      "conv1d",
      [](const Tensor& x, const Tensor& w, const OT& b, int64_t stride, int64_t padding, int64_t dilation, int64_t groups) {
        return conv1d(x, w, opt(b), stride, padding, dilation, groups);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1, py::arg("padding") = 0,
      py::arg("dilation") = 1, py::arg("groups") = 1, nogil());
  m.def(
      "conv3d",
      [](const Tensor& x, const Tensor& w, const OT& b, const py::object& stride, const py::object& padding, const py::object& dilation,
         int64_t groups) {
        const Size3 s = size3(stride), p = size3(padding), d = size3(dilation);
        py::gil_scoped_release nogil;
        return conv3d(x, w, opt(b), s, p, d, groups);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1, py::arg("padding") = 0,
      py::arg("dilation") = 1, py::arg("groups") = 1);
  m.def(
      "conv_transpose2d",
      [](const Tensor& x, const Tensor& w, const OT& b, const py::object& stride, const py::object& padding,
         const py::object& output_padding, int64_t groups, const py::object& dilation) {
        const Size2 s = size2(stride), p = size2(padding), op = size2(output_padding), d = size2(dilation);
        py::gil_scoped_release nogil;
        return conv_transpose2d(x, w, opt(b), s, p, op, groups, d);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1, py::arg("padding") = 0,
      py::arg("output_padding") = 0, py::arg("groups") = 1, py::arg("dilation") = 1);
  m.def(
      "pad",
      [](const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode, double value) {
        const PadMode pm = mode == "constant"    ? PadMode::constant
                           : mode == "reflect"   ? PadMode::reflect
                           : mode == "replicate" ? PadMode::replicate
                           : mode == "circular"
                               ? PadMode::circular
                               : throw Error("pad: mode must be constant, reflect, replicate or circular, got '" + mode + "'");
        return pad(x, pads, pm, value);
      },
      py::arg("input"), py::arg("pad"), py::arg("mode") = "constant", py::arg("value") = 0.0, nogil());
  m.def(
      "max_pool2d",
      [](const Tensor& x, const py::object& k, const py::object& stride, const py::object& padding, const py::object& dilation,
         bool ceil_mode, bool return_indices) {
        const Size2 ks = size2(k), p = size2(padding), d = size2(dilation);
        const auto s = opt_size2(stride);
        if (return_indices) {
          TESSERA_CHECK(!ceil_mode, "max_pool2d", "return_indices with ceil_mode is not supported");
          std::pair<Tensor, Tensor> r;
          {
            py::gil_scoped_release nogil;
            r = max_pool2d_with_indices(x, ks, s, p, d);
          }
          return py::object(py::make_tuple(r.first, r.second));
        }
        Tensor out;
        {
          py::gil_scoped_release nogil;
          out = max_pool2d(x, ks, s, p, d, ceil_mode);
        }
        return py::object(py::cast(out));
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0, py::arg("dilation") = 1,
      py::arg("ceil_mode") = false, py::arg("return_indices") = false);
  m.def(
      "dropout_add",
      [](const Tensor& x, const std::optional<Tensor>& residual, double p, bool training) {
        return dropout_add(x, residual ? *residual : Tensor(), p, training);
      },
      py::arg("input"), py::arg("residual"), py::arg("p") = 0.5, py::arg("training") = true, nogil(),
      "residual + dropout(input, p) in one kernel (the mask regenerated in backward, never stored).");
  m.def(
      "avg_pool2d",
      [](const Tensor& x, const py::object& k, const py::object& stride, const py::object& padding, bool ceil_mode,
         bool count_include_pad) {
        const Size2 ks = size2(k), p = size2(padding);
        const auto s = opt_size2(stride);
        py::gil_scoped_release nogil;
        return avg_pool2d(x, ks, s, p, count_include_pad, ceil_mode);
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0, py::arg("ceil_mode") = false,
      py::arg("count_include_pad") = true);
  m.def(
      "adaptive_avg_pool2d", [](const Tensor& x, const py::object& size) { return adaptive_avg_pool2d(x, size2(size)); }, py::arg("input"),
      py::arg("output_size"));
  m.def(
      "batch_norm",
      [](const Tensor& x, const OT& rm, const OT& rv, const OT& w, const OT& b, bool training, double momentum, double eps) {
        return batch_norm(x, opt(rm), opt(rv), opt(w), opt(b), training, momentum, eps);
      },
      py::arg("input"), py::arg("running_mean"), py::arg("running_var"), py::arg("weight") = py::none(), py::arg("bias") = py::none(),
      py::arg("training") = false, py::arg("momentum") = 0.1, py::arg("eps") = 1e-5, nogil());
  m.def(
      "layer_norm",
      [](const Tensor& x, const py::object& normalized_shape, const OT& w, const OT& b, double eps) {
        const auto dims = static_cast<int64_t>(py::isinstance<py::int_>(normalized_shape) ? 1 : py::len(normalized_shape));
        py::gil_scoped_release nogil;
        return layer_norm(x, dims, opt(w), opt(b), eps);
      },
      py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(), py::arg("bias") = py::none(), py::arg("eps") = 1e-5);
  m.def(
      "group_norm",
      [](const Tensor& x, int64_t groups, const OT& w, const OT& b, double eps) { return group_norm(x, groups, opt(w), opt(b), eps); },
      py::arg("input"), py::arg("num_groups"), py::arg("weight") = py::none(), py::arg("bias") = py::none(), py::arg("eps") = 1e-5,
      nogil());
  m.def(
      "instance_norm", [](const Tensor& x, const OT& w, const OT& b, double eps) { return instance_norm(x, opt(w), opt(b), eps); },
      py::arg("input"), py::arg("weight") = py::none(), py::arg("bias") = py::none(), py::arg("eps") = 1e-5, nogil());
  m.def(
      "cross_entropy",
      [](const Tensor& logits, const Tensor& target, const OT& weight, int64_t ignore_index, const std::string& reduction,
         double smoothing) {
        const Reduction r = reduction_arg(reduction);
        py::gil_scoped_release nogil;
        return weight ? cross_entropy(logits, target, *weight, r, smoothing, ignore_index)
                      : cross_entropy(logits, target, r, smoothing, ignore_index);
      },
      py::arg("input"), py::arg("target"), py::arg("weight") = py::none(), py::arg("ignore_index") = -100, py::arg("reduction") = "mean",
      py::arg("label_smoothing") = 0.0);
  m.def(
      "nll_loss",
      [](const Tensor& lp, const Tensor& target, int64_t ignore_index, const std::string& reduction) {
        return nll_loss(lp, target, reduction_arg(reduction), ignore_index);
      },
      py::arg("input"), py::arg("target"), py::arg("ignore_index") = -100, py::arg("reduction") = "mean");
  m.def(
      "mse_loss", [](const Tensor& a, const Tensor& b, const std::string& r) { return mse_loss(a, b, reduction_arg(r)); }, py::arg("input"),
      py::arg("target"), py::arg("reduction") = "mean");
  m.def(
      "l1_loss", [](const Tensor& a, const Tensor& b, const std::string& r) { return l1_loss(a, b, reduction_arg(r)); }, py::arg("input"),
      py::arg("target"), py::arg("reduction") = "mean");
  m.def(
      "binary_cross_entropy_with_logits",
      [](const Tensor& a, const Tensor& b, const std::string& r, const OT& pos_weight) {
        return binary_cross_entropy_with_logits(a, b, reduction_arg(r), opt(pos_weight));
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", py::arg("pos_weight") = py::none());
  m.def(
      "dropout", [](const Tensor& x, double p, bool training) { return dropout(x, p, training); }, py::arg("input"), py::arg("p") = 0.5,
      py::arg("training") = true, nogil());
  m.def(
      "scaled_dot_product_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, const OT& mask, double dropout_p, bool is_causal, std::optional<double> scale) {
        return mask ? scaled_dot_product_attention(q, k, v, *mask, dropout_p, is_causal, scale)
                    : scaled_dot_product_attention(q, k, v, is_causal, dropout_p, scale);
      },
      py::arg("query"), py::arg("key"), py::arg("value"), py::arg("attn_mask") = py::none(), py::arg("dropout_p") = 0.0,
      py::arg("is_causal") = false, py::arg("scale") = py::none(), nogil());
  m.def(
      "embedding",
      [](const Tensor& idx, const Tensor& w, std::optional<int64_t> padding_idx) {
        return padding_idx ? embedding(w, idx, *padding_idx) : embedding(w, idx);
      },
      py::arg("input"), py::arg("weight"), py::arg("padding_idx") = py::none(), nogil());
  m.def(
      "one_hot",
      [](const Tensor& labels, int64_t n) {
        if (n < 0) n = amax(labels).item<int64_t>() + 1;
        return one_hot(labels, n);
      },
      py::arg("tensor"), py::arg("num_classes") = -1, nogil());
  m.def(
      "grid_sample",
      [](const Tensor& input, const Tensor& grid, const std::string& mode, const std::string& padding_mode, bool align_corners) {
        const SampleMode sm = mode == "bilinear"  ? SampleMode::bilinear
                              : mode == "nearest" ? SampleMode::nearest
                              : mode == "bicubic"
                                  ? SampleMode::bicubic
                                  : throw Error("grid_sample: mode must be bilinear, nearest or bicubic, got '" + mode + "'");
        const SamplePadding sp =
            padding_mode == "zeros"    ? SamplePadding::zeros
            : padding_mode == "border" ? SamplePadding::border
            : padding_mode == "reflection"
                ? SamplePadding::reflection
                : throw Error("grid_sample: padding_mode must be zeros, border or reflection, got '" + padding_mode + "'");
        return grid_sample(input, grid, sm, sp, align_corners);
      },
      py::arg("input"), py::arg("grid"), py::arg("mode") = "bilinear", py::arg("padding_mode") = "zeros", py::arg("align_corners") = false,
      nogil());
}

}  // namespace tessera::python
