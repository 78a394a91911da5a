// ONNX shape and data-movement ops: Reshape, Flatten, Transpose, (Un)Squeeze, Concat, Split,
// Slice, Gather(Elements), Expand, Tile, Pad, Shape, Size, Constant(OfShape), Range,
// Depth/SpaceToDepth.
#include <algorithm>
#include <limits>

#include "proto.h"

namespace tessera::onnx {

namespace {
using Out = std::vector<Tensor>;

Tensor host_i64(const std::vector<int64_t>& v, Device device) {
  return from_vector(v, {static_cast<int64_t>(v.size())}).to(device);
}
// Negative indices count from the end in ONNX; Tessera's indexing does not wrap.
Tensor wrap_indices(const Tensor& idx, int64_t size) {
  const Tensor i = idx.to(DType::i64);
  return where(lt(i, 0), add(i, size), i);
}
// The axes of (Un)Squeeze and the Reduce ops: an attribute before opset 13 (18 for most
// reductions), an input after.
std::vector<int64_t> axes_arg(const Ctx& c, size_t input, int64_t since) {
  if (c.opset() >= since) return c.has(input) ? c.ints(input) : std::vector<int64_t>{};
  return c.attr_ints("axes");
}
}  // namespace

std::vector<int64_t> onnx_axes(const Ctx& c, size_t input, int64_t since) { return axes_arg(c, input, since); }

void register_tensor_ops(OpTable& t) {
  t["Einsum"] = {[](const Ctx& c) {
                   std::vector<Tensor> operands;
                   for (size_t i = 0; i < c.num_inputs(); ++i) operands.push_back(c.in(i));
                   return Out{einsum(c.attr_s("equation", ""), operands)};
                 },
                 {}};
  t["Reshape"] = {[](const Ctx& c) {
                    const Tensor x = c.in(0);
                    std::vector<int64_t> shape = c.ints(1);
                    const bool allowzero = c.attr_i("allowzero", 0) != 0;
                    for (size_t i = 0; i < shape.size(); ++i) {
                      if (shape[i] == 0 && !allowzero) shape[i] = x.size(static_cast<int64_t>(i));
                    }
                    return Out{x.reshape(Shape(shape.begin(), shape.end()))};
                  },
                  {}};
  t["Flatten"] = {[](const Ctx& c) {
                    const Tensor x = c.in(0);
                    const int64_t a = c.attr_i("axis", 1) < 0 ? c.attr_i("axis", 1) + x.dim() : c.attr_i("axis", 1);
                    int64_t outer = 1;
                    for (int64_t d = 0; d < a; ++d) outer *= x.size(d);
                    return Out{x.reshape({outer, outer == 0 ? 0 : x.numel() / std::max<int64_t>(outer, 1)})};
                  },
                  {}};
  t["Transpose"] = {[](const Ctx& c) {
                      const Tensor x = c.in(0);
                      std::vector<int64_t> perm = c.attr_ints("perm");
                      if (perm.empty()) {
                        for (int64_t d = x.dim() - 1; d >= 0; --d) perm.push_back(d);
                      }
                      return Out{x.permute(perm)};
                    },
                    {}};
  t["Squeeze"] = {[](const Ctx& c) {
                    Tensor x = c.in(0);
                    std::vector<int64_t> axes = axes_arg(c, 1, 13);
                    if (axes.empty()) return Out{x.squeeze()};
                    for (int64_t& a : axes) a = axis_of(a, x.dim(), c.node());
                    std::sort(axes.rbegin(), axes.rend());
                    for (int64_t a : axes) x = x.squeeze(a);
                    return Out{x};
                  },
                  {}};
  t["Unsqueeze"] = {[](const Ctx& c) {
                      Tensor x = c.in(0);
                      std::vector<int64_t> axes = axes_arg(c, 1, 13);
                      const int64_t rank = x.dim() + static_cast<int64_t>(axes.size());
                      for (int64_t& a : axes) a = axis_of(a, rank, c.node());
                      std::sort(axes.begin(), axes.end());
                      for (int64_t a : axes) x = x.unsqueeze(a);
                      return Out{x};
                    },
                    {}};
  t["Concat"] = {[](const Ctx& c) {
                   std::vector<Tensor> parts;
                   for (size_t i = 0; i < c.num_inputs(); ++i) parts.push_back(c.in(i));
                   return Out{cat(parts, axis_of(c.attr_i("axis", 0), parts[0].dim(), c.node()))};
                 },
                 {}};
  t["Split"] = {[](const Ctx& c) {
                  const Tensor x = c.in(0);
                  const int64_t a = axis_of(c.attr_i("axis", 0), x.dim(), c.node());
                  std::vector<int64_t> sizes = c.opset() >= 13 ? (c.has(1) ? c.ints(1) : std::vector<int64_t>{}) : c.attr_ints("split");
                  if (sizes.empty()) {
                    const int64_t n = c.has_attr("num_outputs") ? c.attr_i("num_outputs", 1) : c.node().output_size();
                    const int64_t each = (x.size(a) + n - 1) / n;
                    for (int64_t i = 0, left = x.size(a); i < n; ++i, left -= each) sizes.push_back(std::min(each, left));
                  }
                  return split(x, sizes, a);
                },
                {}};
  t["Slice"] = {[](const Ctx& c) {
                  Tensor x = c.in(0);
                  std::vector<int64_t> starts, ends, axes, steps;
                  if (c.opset() < 10) {
                    starts = c.attr_ints("starts"), ends = c.attr_ints("ends"), axes = c.attr_ints("axes");
                  } else {
                    starts = c.ints(1), ends = c.ints(2);
                    if (c.has(3)) axes = c.ints(3);
                    if (c.has(4)) steps = c.ints(4);
                  }
                  if (axes.empty()) {
                    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
                  }
                  for (size_t i = 0; i < axes.size(); ++i) {
                    const int64_t a = axis_of(axes[i], x.dim(), c.node()), n = x.size(a), step = steps.empty() ? 1 : steps[i];
                    TESSERA_CHECK(step != 0, "onnx", "Slice step must not be 0");
                    auto clampi = [](int64_t v, int64_t lo, int64_t hi) { return std::min(std::max(v, lo), hi); };
                    int64_t s = starts[i] < 0 ? starts[i] + n : starts[i], e = ends[i] < 0 ? ends[i] + n : ends[i];
                    if (ends[i] >= std::numeric_limits<int64_t>::max() / 2) e = n;
                    if (step > 0) {
                      s = clampi(s, 0, n), e = clampi(e, 0, n);
                      x = x.slice(a, s, std::max(s, e), step);
                    } else {  // backwards: the indices, gathered
                      s = clampi(s, 0, n - 1), e = clampi(e, -1, n - 1);
                      std::vector<int64_t> idx;
                      for (int64_t k = s; k > e; k += step) idx.push_back(k);
                      x = index_select(x, a, host_i64(idx, x.device()));
                    }
                  }
                  return Out{x};
                },
                {}};
  t["Gather"] = {[](const Ctx& c) {
                   const Tensor x = c.in(0);
                   const int64_t a = axis_of(c.attr_i("axis", 0), x.dim(), c.node());
                   const Tensor idx = wrap_indices(c.in(1), x.size(a));
                   Shape out = x.shape();
                   out.erase(out.begin() + a);
                   out.insert(out.begin() + a, idx.shape().begin(), idx.shape().end());
                   return Out{index_select(x, a, idx.reshape({-1})).reshape(out)};
                 },
                 {}};
  // GatherND: each index row (the last axis of indices, depth k) picks a slice of data; the first
  // batch_dims axes of both are batch axes. As one index_select over data seen as
  // [batch * rows addressed by the index, rest], rows by their row-major number.
  t["GatherND"] = {[](const Ctx& c) {
                     const Tensor x = c.in(0), idx = c.in(1).to(DType::i64);
                     const int64_t b = c.attr_i("batch_dims", 0), k = idx.size(idx.dim() - 1);
                     TESSERA_CHECK(b >= 0 && b < idx.dim() && b + k <= x.dim(), "onnx", "GatherND: batch_dims ", b, " and index depth ", k,
                                   " do not fit data ", shape_str(x.shape()), " and indices ", shape_str(idx.shape()));
                     int64_t batch = 1, rows = 1;
                     for (int64_t a = 0; a < b; ++a) batch *= x.size(a);
                     std::vector<int64_t> dims(x.shape().begin() + b, x.shape().begin() + b + k), steps(static_cast<size_t>(k), 1);
                     for (int64_t j = k - 2; j >= 0; --j) steps[static_cast<size_t>(j)] = steps[static_cast<size_t>(j) + 1] * dims[static_cast<size_t>(j) + 1];
                     for (int64_t d : dims) rows *= d;
                     const Tensor dim_t = from_vector(dims, {k}).to(x.device()), step_t = from_vector(steps, {k}).to(x.device());
                     const Tensor wrapped = where(lt(idx, int64_t{0}), add(idx, dim_t), idx);
                     Tensor row = k ? sum(mul(wrapped, step_t), {-1}) : zeros(Shape(idx.shape().begin(), idx.shape().end() - 1), DType::i64, x.device());
                     if (b > 0) {  // the batch a row belongs to: its position in the first b axes of indices
                       Shape bshape(static_cast<size_t>(row.dim()), 1);
                       for (int64_t a = 0; a < b; ++a) bshape[static_cast<size_t>(a)] = idx.size(a);
                       row = add(row, mul(arange(0, static_cast<double>(batch), 1, DType::i64, x.device()).reshape(bshape), rows));
                     }
                     Shape rest(x.shape().begin() + b + k, x.shape().end()), out(idx.shape().begin(), idx.shape().end() - 1);
                     out.insert(out.end(), rest.begin(), rest.end());
                     Shape flat{batch * rows};
                     flat.insert(flat.end(), rest.begin(), rest.end());
                     return Out{index_select(x.reshape(flat), 0, row.reshape({-1})).reshape(out)};
                   },
                   {}};
  // EyeLike: ones on the diagonal j = i + k of a 2-D shape like the input's, in its dtype or `dtype`.
  t["EyeLike"] = {[](const Ctx& c) {
                    const Tensor x = c.in(0);
                    TESSERA_CHECK(x.dim() == 2, "onnx", "EyeLike needs a 2-D input, got ", shape_str(x.shape()));
                    const DType dt = c.has_attr("dtype") ? dtype_from_onnx(static_cast<int>(c.attr_i("dtype", 1)), "EyeLike's dtype") : x.dtype();
                    const Tensor i = arange(0, static_cast<double>(x.size(0)), 1, DType::i64, x.device()).reshape({x.size(0), 1});
                    const Tensor j = arange(0, static_cast<double>(x.size(1)), 1, DType::i64, x.device()).reshape({1, x.size(1)});
                    return Out{eq(sub(j, i), c.attr_i("k", 0)).to(dt)};
                  },
                  {}};
  t["GatherElements"] = {[](const Ctx& c) {
                           const Tensor x = c.in(0);
                           const int64_t a = axis_of(c.attr_i("axis", 0), x.dim(), c.node());
                           return Out{gather(x, a, wrap_indices(c.in(1), x.size(a)))};
                         },
                         {}};
  t["Expand"] = {[](const Ctx& c) {
                   const Tensor x = c.in(0);
                   const std::vector<int64_t> s = c.ints(1);
                   // ONNX Expand broadcasts both ways: a 1 in the target keeps the input's size.
                   const Shape target = broadcast_shapes(x.shape(), Shape(s.begin(), s.end()), "Expand");
                   return Out{broadcast_to(x, target).contiguous()};
                 },
                 {}};
  t["Tile"] = {[](const Ctx& c) {
                 const Tensor x = c.in(0);
                 const std::vector<int64_t> reps = c.ints(1);
                 Shape expanded, out;
                 Tensor v = x;
                 for (int64_t d = x.dim() - 1; d >= 0; --d) v = v.unsqueeze(d);  // [1, s0, 1, s1, ...]
                 for (int64_t d = 0; d < x.dim(); ++d) {
                   expanded.push_back(reps[d]), expanded.push_back(x.size(d));
                   out.push_back(reps[d] * x.size(d));
                 }
                 return Out{broadcast_to(v, expanded).contiguous().reshape(out)};
               },
               {}};
  t["Shape"] = {[](const Ctx& c) {
                  const Tensor x = c.in(0);
                  const int64_t r = x.dim();
                  int64_t s = c.attr_i("start", 0), e = c.attr_i("end", r);
                  s = std::clamp(s < 0 ? s + r : s, int64_t{0}, r), e = std::clamp(e < 0 ? e + r : e, int64_t{0}, r);
                  std::vector<int64_t> dims;
                  for (int64_t d = s; d < e; ++d) dims.push_back(x.size(d));
                  return Out{host_i64(dims, x.device())};
                },
                {}};
  t["Size"] = {[](const Ctx& c) { return Out{full({}, c.in(0).numel(), DType::i64, c.device())}; }, {}};
  t["Constant"] = {[](const Ctx& c) {
                     if (c.has_attr("value")) return Out{c.attr_t("value").to(c.device())};
                     if (c.has_attr("value_float")) return Out{full({}, c.attr_f("value_float", 0), DType::f32, c.device())};
                     if (c.has_attr("value_int")) return Out{full({}, c.attr_i("value_int", 0), DType::i64, c.device())};
                     if (c.has_attr("value_floats")) {
                       const auto v = c.attr_floats("value_floats");
                       return Out{from_vector(v, {static_cast<int64_t>(v.size())}).to(DType::f32).to(c.device())};
                     }
                     return Out{host_i64(c.attr_ints("value_ints"), c.device())};
                   },
                   [](const ::onnx::NodeProto& n, int64_t) {
                     for (const auto& a : n.attribute()) {
                       if (a.name() == "sparse_value" || a.name() == "value_string" || a.name() == "value_strings") unsupported(n, a.name());
                     }
                   }};
  t["ConstantOfShape"] = {[](const Ctx& c) {
                            const std::vector<int64_t> s = c.ints(0);
                            Tensor v = c.has_attr("value") ? c.attr_t("value") : zeros({1}, DType::f32);
                            return Out{full(Shape(s.begin(), s.end()), v.reshape({}).to(DType::f64).item<double>(), v.dtype(), c.device())};
                          },
                          {}};
  t["Range"] = {[](const Ctx& c) {
                  const double s = c.scalar(0), e = c.scalar(1), d = c.scalar(2);
                  return Out{arange(s, e, d, c.in(0).dtype(), c.device())};
                },
                {}};
  t["Pad"] = {[](const Ctx& c) {
                const Tensor x = c.in(0);
                const std::vector<int64_t> pads = c.opset() >= 11 ? c.ints(1) : c.attr_ints("pads");
                const double value = c.opset() >= 11 ? (c.has(2) ? c.scalar(2) : 0.0) : c.attr_f("value", 0.0);
                std::vector<int64_t> axes;
                if (c.has(3)) axes = c.ints(3);
                if (axes.empty()) {
                  for (int64_t d = 0; d < x.dim(); ++d) axes.push_back(d);
                }
                const size_t k = axes.size();
                // constant, reflect, edge, wrap: PyTorch's constant, reflect, replicate, circular
                const std::string mode = c.attr_s("mode", "constant");
                const PadMode m = mode == "reflect" ? PadMode::reflect
                                  : mode == "edge"  ? PadMode::replicate
                                  : mode == "wrap"  ? PadMode::circular
                                                    : PadMode::constant;
                Tensor y = x;
                for (size_t i = 0; i < k; ++i) {
                  const int64_t a = axis_of(axes[i], x.dim(), c.node());
                  std::vector<int64_t> p(static_cast<size_t>(2 * (x.dim() - a)), 0);
                  p[p.size() - 2] = pads[i];
                  p[p.size() - 1] = pads[i + k];
                  y = pad(y, p, m, m == PadMode::constant ? value : 0.0);
                }
                return Out{y};
              },
              [](const ::onnx::NodeProto& n, int64_t) {
                for (const auto& a : n.attribute()) {
                  if (a.name() == "mode" && a.s() != "constant" && a.s() != "reflect" && a.s() != "edge" && a.s() != "wrap") {
                    unsupported(n, "mode \"" + a.s() + "\"");
                  }
                }
              }};
  t["DepthToSpace"] = {[](const Ctx& c) {
                         const Tensor x = c.in(0);
                         const int64_t b = c.attr_i("blocksize", 1), n = x.size(0), ch = x.size(1), h = x.size(2), w = x.size(3);
                         const bool crd = c.attr_s("mode", "DCR") == "CRD";
                         const Tensor v = crd ? x.reshape({n, ch / (b * b), b, b, h, w}).permute({0, 1, 4, 2, 5, 3})
                                              : x.reshape({n, b, b, ch / (b * b), h, w}).permute({0, 3, 4, 1, 5, 2});
                         return Out{v.contiguous().reshape({n, ch / (b * b), h * b, w * b})};
                       },
                       {}};
  t["SpaceToDepth"] = {[](const Ctx& c) {
                         const Tensor x = c.in(0);
                         const int64_t b = c.attr_i("blocksize", 1), n = x.size(0), ch = x.size(1), h = x.size(2), w = x.size(3);
                         const Tensor v = x.reshape({n, ch, h / b, b, w / b, b}).permute({0, 3, 5, 1, 2, 4});
                         return Out{v.contiguous().reshape({n, ch * b * b, h / b, w / b})};
                       },
                       {}};
}

}  // namespace tessera::onnx
