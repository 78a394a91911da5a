// ONNX elementwise ops: unary math and activations, broadcasting binaries, variadic
// Sum/Mean/Max/Min, comparisons and logic, Where, Clip, Cast.
#include <cmath>

#include "proto.h"

namespace tessera::onnx {

namespace {
using Out = std::vector<Tensor>;

void unary(OpTable& t, const char* name, Tensor (*fn)(const Tensor&)) {
  t[name] = {[fn](const Ctx& c) { return Out{fn(c.in(0))}; }, {}};
}
void binary(OpTable& t, const char* name, Tensor (*fn)(const Tensor&, const Tensor&)) {
  t[name] = {[fn](const Ctx& c) { return Out{fn(c.in(0), c.in(1))}; }, {}};
}
// Sum, Mean, Max, Min: any number of broadcasting inputs.
void variadic(OpTable& t, const char* name, Tensor (*fn)(const Tensor&, const Tensor&), bool mean) {
  t[name] = {[fn, mean](const Ctx& c) {
               Tensor acc = c.in(0);
               for (size_t i = 1; i < c.num_inputs(); ++i) acc = fn(acc, c.in(i));
               if (c.num_inputs() == 1) acc = acc.clone();
               return Out{mean ? div(acc, static_cast<double>(c.num_inputs())).to(c.in(0).dtype()) : acc};
             },
             {}};
}
Tensor scalar_as(double v, const Tensor& like) { return full({}, v, like.dtype(), like.device()); }
Tensor onnx_div(const Tensor& a, const Tensor& b) {
  // ONNX Div keeps integer types and truncates (C semantics).
  return is_floating(a.dtype()) ? div(a, b) : div(a, b, "trunc");
}
Tensor onnx_pow(const Tensor& a, const Tensor& b) { return pow(a, b.to(a.dtype())).to(a.dtype()); }
Tensor softsign(const Tensor& x) { return div(x, add(abs(x), 1)); }
Tensor identity(const Tensor& x) { return x; }
}  // namespace

void register_elementwise_ops(OpTable& t) {
  unary(t, "Abs", &tessera::abs);
  unary(t, "Neg", &neg);
  unary(t, "Exp", &tessera::exp);
  unary(t, "Log", &tessera::log);
  unary(t, "Sqrt", &tessera::sqrt);
  unary(t, "Reciprocal", &reciprocal);
  unary(t, "Sin", &tessera::sin);
  unary(t, "Cos", &tessera::cos);
  unary(t, "Tan", &tessera::tan);
  unary(t, "Asin", &tessera::asin);
  unary(t, "Acos", &tessera::acos);
  unary(t, "Atan", &tessera::atan);
  unary(t, "Tanh", &tessera::tanh);
  unary(t, "Sigmoid", &sigmoid);
  unary(t, "Relu", &relu);
  unary(t, "Floor", &tessera::floor);
  unary(t, "Ceil", &tessera::ceil);
  unary(t, "Round", &tessera::round);
  unary(t, "Sign", &sign);
  unary(t, "Erf", &tessera::erf);
  unary(t, "Softplus", &softplus);
  unary(t, "Softsign", &softsign);
  unary(t, "HardSwish", &hardswish);
  unary(t, "Mish", &mish);
  unary(t, "IsNaN", &isnan);
  unary(t, "Not", &logical_not);
  unary(t, "Identity", &identity);
  unary(t, "Sinh", &tessera::sinh);  // kernels now: the compositions cancelled (sinh near 0, asinh below 0)
  unary(t, "Cosh", &tessera::cosh);
  unary(t, "Asinh", &tessera::asinh);
  unary(t, "Acosh", &tessera::acosh);
  unary(t, "Atanh", &tessera::atanh);
  t["Elu"] = {[](const Ctx& c) { return Out{elu(c.in(0), c.attr_f("alpha", 1.0))}; }, {}};
  t["Celu"] = {[](const Ctx& c) {
                 const double a = c.attr_f("alpha", 1.0);
                 const Tensor x = c.in(0);
                 return Out{add(relu(x), minimum(mul(expm1(div(x, a)), a), 0.0).to(x.dtype()))};
               },
               {}};
  t["Selu"] = {[](const Ctx& c) {
                 const double a = c.attr_f("alpha", 1.67326319217681884765625), g = c.attr_f("gamma", 1.05070102214813232421875);
                 const Tensor x = c.in(0);
                 return Out{mul(where(gt(x, 0), x, mul(expm1(x), a)), g)};
               },
               {}};
  t["LeakyRelu"] = {[](const Ctx& c) { return Out{leaky_relu(c.in(0), c.attr_f("alpha", 0.01))}; }, {}};
  t["ThresholdedRelu"] = {[](const Ctx& c) {
                            const Tensor x = c.in(0);
                            return Out{where(gt(x, c.attr_f("alpha", 1.0)), x, scalar_as(0, x))};
                          },
                          {}};
  t["HardSigmoid"] = {[](const Ctx& c) {
                        const Tensor x = c.in(0);
                        return Out{clamp(add(mul(x, c.attr_f("alpha", 0.2)), c.attr_f("beta", 0.5)), 0, 1)};
                      },
                      {}};
  t["PRelu"] = {[](const Ctx& c) {
                  const Tensor x = c.in(0);
                  return Out{where(lt(x, 0), mul(x, c.in(1)), x)};
                },
                {}};
  t["Shrink"] = {[](const Ctx& c) {
                   const Tensor x = c.in(0);
                   const double l = c.attr_f("lambd", 0.5), b = c.attr_f("bias", 0.0);
                   const Tensor y = where(lt(x, -l), add(x, b), where(gt(x, l), sub(x, b), scalar_as(0, x)));
                   return Out{y.to(x.dtype())};
                 },
                 {}};
  t["IsInf"] = {[](const Ctx& c) {
                  const Tensor x = c.in(0);
                  const bool pos = c.attr_i("detect_positive", 1) != 0, neg_inf = c.attr_i("detect_negative", 1) != 0;
                  Tensor r = zeros(x.shape(), DType::boolean, x.device());
                  if (pos) r = logical_or(r, eq(x, INFINITY));
                  if (neg_inf) r = logical_or(r, eq(x, -INFINITY));
                  return Out{r};
                },
                {}};

  binary(t, "Add", &add);
  binary(t, "Sub", &sub);
  binary(t, "Mul", &mul);
  binary(t, "Div", &onnx_div);
  binary(t, "Pow", &onnx_pow);
  binary(t, "Equal", &eq);
  binary(t, "Less", &lt);
  binary(t, "LessOrEqual", &le);
  binary(t, "Greater", &gt);
  binary(t, "GreaterOrEqual", &ge);
  binary(t, "And", &logical_and);
  binary(t, "Or", &logical_or);
  binary(t, "Xor", &logical_xor);
  binary(t, "BitwiseAnd", &bitwise_and);
  binary(t, "BitwiseOr", &bitwise_or);
  binary(t, "BitwiseXor", &bitwise_xor);
  unary(t, "BitwiseNot", &bitwise_not);
  t["BitShift"] = {[](const Ctx& c) {
                     const bool left = c.attr_s("direction", "") == "LEFT";
                     return Out{left ? bitwise_left_shift(c.in(0), c.in(1)) : bitwise_right_shift(c.in(0), c.in(1))};
                   },
                   [](const ::onnx::NodeProto& n, int64_t) {
                     const std::string d = attr_text(n, "direction");
                     if (d != "\"LEFT\"" && d != "\"RIGHT\"") throw Unsupported("onnx: BitShift needs direction \"LEFT\" or \"RIGHT\", got " + d);
                   }};
  t["Mod"] = {[](const Ctx& c) {
                const bool f = c.attr_i("fmod", 0) != 0;
                return Out{f ? tessera::fmod(c.in(0), c.in(1)) : remainder(c.in(0), c.in(1))};
              },
              {}};
  variadic(t, "Sum", &add, false);
  variadic(t, "Mean", &add, true);
  variadic(t, "Max", &maximum, false);
  variadic(t, "Min", &minimum, false);
  t["Where"] = {[](const Ctx& c) { return Out{where(c.in(0), c.in(1), c.in(2))}; }, {}};
  t["Clip"] = {[](const Ctx& c) {
                 Tensor x = c.in(0);
                 if (c.opset() < 11) return Out{clamp(x, c.attr_f("min", -INFINITY), c.attr_f("max", INFINITY))};
                 if (c.has(1)) x = maximum(x, c.in(1));
                 if (c.has(2)) x = minimum(x, c.in(2));
                 return Out{c.has(1) || c.has(2) ? x : x.clone()};
               },
               {}};
  t["Cast"] = {[](const Ctx& c) { return Out{cast(c.in(0), dtype_from_onnx(static_cast<int>(c.attr_i("to", 1)), "Cast's 'to'"))}; },
               [](const ::onnx::NodeProto& n, int64_t) {
                 for (const auto& a : n.attribute()) {
                   if (a.name() == "to") dtype_from_onnx(static_cast<int>(a.i()), "Cast's 'to'");
                 }
               }};
  t["CastLike"] = {[](const Ctx& c) { return Out{cast(c.in(0), c.in(1).dtype())}; }, {}};
}

}  // namespace tessera::onnx
