// ONNX integer and quantized linear algebra: MatMulInteger, ConvInteger, QLinearMatMul,
// QLinearConv and DynamicQuantizeLinear. The integer products run in f64 (exact: 8-bit
// operands, sums far below 2^53) through Tessera's matmul and conv, then round to int32 or
// requantize: saturate(round_half_even(real / y_scale) + y_zero_point).
#include <algorithm>
#include <cmath>

#include "proto.h"

namespace tessera::onnx {
namespace {
using Out = std::vector<Tensor>;

// x - zero_point in f64; a zero point with one value, or one per index of the axis
// `per_axis_from_end` from the end (a matrix operand's rows or columns, a conv weight's output
// channels).
Tensor centred(const Tensor& x, const Tensor& zp, int64_t per_axis_from_end) {
  const Tensor xf = x.to(DType::f64);
  if (!zp.defined()) return xf;
  if (zp.numel() == 1) return sub(xf, zp.to(DType::f64).reshape({}));
  Shape s(static_cast<size_t>(x.dim()), 1);
  s[static_cast<size_t>(x.dim() - per_axis_from_end)] = zp.numel();
  return sub(xf, zp.to(DType::f64).reshape(s));
}
// A scale with one value, or one per row / column (reshaped like centred's zero points).
Tensor scale_of(const Tensor& scale, int64_t rank, int64_t per_axis_from_end) {
  const Tensor s = scale.to(DType::f64);
  if (s.numel() == 1) return s.reshape({});
  Shape shape(static_cast<size_t>(rank), 1);
  shape[static_cast<size_t>(rank - per_axis_from_end)] = s.numel();
  return s.reshape(shape);
}
Tensor requantize(const Tensor& real, const Tensor& y_scale, const Tensor& y_zp) {
  const DType out = y_zp.defined() ? y_zp.dtype() : DType::u8;
  if (out != DType::u8 && out != DType::i8) throw Unsupported(detail::concat("onnx: requantizing to ", out, " is not supported"));
  Tensor q = round(div(real, y_scale.to(DType::f64).reshape({})));
  if (y_zp.defined()) q = add(q, y_zp.to(DType::f64).reshape({}));
  return clamp(q, out == DType::u8 ? 0.0 : -128.0, out == DType::u8 ? 255.0 : 127.0).to(out);
}
Tensor opt(const Ctx& c, size_t i) { return c.has(i) ? c.in(i) : Tensor(); }

// The Conv of (x - x_zp) and (w - w_zp, per output channel) with an optional bias, in f64.
Tensor integer_conv(const Ctx& c, const Tensor& x, const Tensor& x_zp, const Tensor& w, const Tensor& w_zp, const Tensor& bias) {
  std::vector<Tensor> in{centred(x, x_zp, 0), centred(w, w_zp, w.dim()), bias.defined() ? bias.to(DType::f64) : Tensor()};
  if (x_zp.defined() && x_zp.numel() != 1) throw Unsupported("onnx: a per-channel input zero point is not supported");
  return conv_node(Ctx(c.node(), c.opset(), c.device(), std::move(in)));
}

Out matmul_integer(const Ctx& c) { return Out{matmul(centred(c.in(0), opt(c, 2), 2), centred(c.in(1), opt(c, 3), 1)).to(DType::i32)}; }
Out conv_integer(const Ctx& c) { return Out{integer_conv(c, c.in(0), opt(c, 2), c.in(1), opt(c, 3), Tensor()).to(DType::i32)}; }

// QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp).
Out qlinear_matmul(const Ctx& c) {
  const Tensor a = c.in(0), b = c.in(3);
  const Tensor real =
      matmul(mul(centred(a, c.in(2), 2), scale_of(c.in(1), a.dim(), 2)), mul(centred(b, c.in(5), 1), scale_of(c.in(4), b.dim(), 1)));
  return Out{requantize(real, c.in(6), opt(c, 7))};
}
// QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B): B is int32 at scale x_scale * w_scale.
Out qlinear_conv(const Ctx& c) {
  const Tensor acc = integer_conv(c, c.in(0), c.in(2), c.in(3), c.in(5), opt(c, 8));
  const Tensor ws = c.in(4).to(DType::f64);
  Shape per_channel(static_cast<size_t>(acc.dim()), 1);  // [1, M, 1, ...]: one scale per output channel
  per_channel[1] = ws.numel();
  const Tensor scale = mul(c.in(1).to(DType::f64).reshape({}), ws.numel() == 1 ? ws.reshape({}) : ws.reshape(per_channel));
  return Out{requantize(mul(acc, scale), c.in(6), opt(c, 7))};
}

// DynamicQuantizeLinear(x) -> (y u8, y_scale, y_zero_point): the range [min(0, min x),
// max(0, max x)] over 0..255, in f32 as the spec's formula.
Out dynamic_quantize(const Ctx& c) {
  const Tensor x = c.in(0);
  const std::vector<double> v = host_doubles(x);
  float lo = 0.0f, hi = 0.0f;
  for (double e : v) lo = std::min(lo, static_cast<float>(e)), hi = std::max(hi, static_cast<float>(e));
  const float scale = (hi - lo) / 255.0f;
  const float zp = scale > 0 ? std::clamp(std::nearbyint(0.0f - lo / scale), 0.0f, 255.0f) : 0.0f;
  const Tensor scale_t = full({}, static_cast<double>(scale), DType::f32, c.device());
  const Tensor y = scale > 0 ? clamp(add(round(div(x.to(DType::f32), scale_t)), static_cast<double>(zp)), 0.0, 255.0).to(DType::u8)
                             : zeros(x.shape(), DType::u8, c.device());
  return Out{y, scale_t, full({}, static_cast<double>(zp), DType::u8, c.device())};
}
}  // namespace

void register_quantized_ops(OpTable& t) {
  t["MatMulInteger"] = {&matmul_integer, {}};
  t["ConvInteger"] = {&conv_integer, {}};
  t["QLinearMatMul"] = {&qlinear_matmul, {}};
  t["QLinearConv"] = {&qlinear_conv, {}};
  t["DynamicQuantizeLinear"] = {&dynamic_quantize, {}};
}

}  // namespace tessera::onnx
