// The C++ ops as tessera.<op>(...) and as Tensor methods, with torch's argument names
// (dim, keepdim, ...), and the Python operators. Every call releases the GIL.
#include <cmath>

#include "bindings.h"

namespace tessera::python {
namespace {

using TT = Tensor (*)(const Tensor&, const Tensor&);
using TS = Tensor (*)(const Tensor&, Scalar);
using ST = Tensor (*)(Scalar, const Tensor&);

struct UnaryOp {
  const char* name;
  Tensor (*fn)(const Tensor&);
};
// The target types pick each op's one-tensor overload.
const UnaryOp kUnaryOps[] = {
    {"neg", &tessera::neg},
    {"abs", &tessera::abs},
    {"sign", &tessera::sign},
    {"square", &tessera::square},
    {"relu", &tessera::relu},
    {"floor", &tessera::floor},
    {"ceil", &tessera::ceil},
    {"round", &tessera::round},
    {"exp", &tessera::exp},
    {"expm1", &tessera::expm1},
    {"log", &tessera::log},
    {"log1p", &tessera::log1p},
    {"sqrt", &tessera::sqrt},
    {"rsqrt", &tessera::rsqrt},
    {"reciprocal", &tessera::reciprocal},
    {"sin", &tessera::sin},
    {"cos", &tessera::cos},
    {"tanh", &tessera::tanh},
    {"sigmoid", &tessera::sigmoid},
    {"silu", &tessera::silu},
    {"erf", &tessera::erf},
    {"trunc", &tessera::trunc},
    {"tan", &tessera::tan},
    {"asin", &tessera::asin},
    {"acos", &tessera::acos},
    {"atan", &tessera::atan},
    {"log2", &tessera::log2},
    {"log10", &tessera::log10},
    {"sinh", &tessera::sinh},
    {"cosh", &tessera::cosh},
    {"asinh", &tessera::asinh},
    {"acosh", &tessera::acosh},
    {"atanh", &tessera::atanh},
    {"exp2", &tessera::exp2},
    {"mish", &tessera::mish},
    {"hardswish", &tessera::hardswish},
    {"hardsigmoid", &tessera::hardsigmoid},
    {"selu", &tessera::selu},
    {"isinf", &tessera::isinf},
    {"isfinite", &tessera::isfinite},
    {"isnan", &tessera::isnan},
    {"logical_not", &tessera::logical_not},
    {"bitwise_not", &tessera::bitwise_not},
};

struct BinaryOp {
  const char* name;
  TT tt;
  TS ts;
  ST st;
};
const BinaryOp kBinaryOps[] = {
    {"add", &tessera::add, &tessera::add, &tessera::add},
    {"sub", &tessera::sub, &tessera::sub, &tessera::sub},
    {"mul", &tessera::mul, &tessera::mul, &tessera::mul},
    {"div", &tessera::div, &tessera::div, &tessera::div},
    {"pow", &tessera::pow, &tessera::pow, &tessera::pow},
    {"maximum", &tessera::maximum, &tessera::maximum, &tessera::maximum},
    {"minimum", &tessera::minimum, &tessera::minimum, &tessera::minimum},
    {"atan2", &tessera::atan2, &tessera::atan2, &tessera::atan2},
    {"fmod", &tessera::fmod, &tessera::fmod, &tessera::fmod},
    {"remainder", &tessera::remainder, &tessera::remainder, &tessera::remainder},
    {"floor_divide", &tessera::floor_divide, &tessera::floor_divide, &tessera::floor_divide},
    {"eq", &tessera::eq, &tessera::eq, &tessera::eq},
    {"ne", &tessera::ne, &tessera::ne, &tessera::ne},
    {"lt", &tessera::lt, &tessera::lt, &tessera::lt},
    {"le", &tessera::le, &tessera::le, &tessera::le},
    {"gt", &tessera::gt, &tessera::gt, &tessera::gt},
    {"ge", &tessera::ge, &tessera::ge, &tessera::ge},
    {"logical_and", &tessera::logical_and, &tessera::logical_and, &tessera::logical_and},
    {"logical_or", &tessera::logical_or, &tessera::logical_or, &tessera::logical_or},
    {"logical_xor", &tessera::logical_xor, &tessera::logical_xor, &tessera::logical_xor},
    {"bitwise_and", &tessera::bitwise_and, &tessera::bitwise_and, &tessera::bitwise_and},
    {"bitwise_or", &tessera::bitwise_or, &tessera::bitwise_or, &tessera::bitwise_or},
    {"bitwise_xor", &tessera::bitwise_xor, &tessera::bitwise_xor, &tessera::bitwise_xor},
    {"bitwise_left_shift", &tessera::bitwise_left_shift, &tessera::bitwise_left_shift, &tessera::bitwise_left_shift},
    {"bitwise_right_shift", &tessera::bitwise_right_shift, &tessera::bitwise_right_shift, &tessera::bitwise_right_shift},
};

void bind_binary(py::module_& m, py::class_<Tensor>& cls, const char* name, TT tt, TS ts, ST st) {
  m.def(name, tt, py::arg("input"), py::arg("other"), nogil());
  m.def(name, ts, py::arg("input"), py::arg("other"), nogil());
  m.def(name, st, py::arg("input"), py::arg("other"), nogil());
  cls.def(name, tt, py::arg("other"), nogil());
  cls.def(name, ts, py::arg("other"), nogil());
}

void bind_operator(py::class_<Tensor>& cls, const std::string& op, TT tt, TS ts, ST st, bool in_place = true) {
  const std::string fwd = "__" + op + "__", rev = "__r" + op + "__";
  cls.def(fwd.c_str(), tt, py::is_operator(), nogil());
  cls.def(fwd.c_str(), ts, py::is_operator(), nogil());
  cls.def(
      rev.c_str(), [st](const Tensor& b, Scalar a) { return st(a, b); }, py::is_operator(), nogil());
  if (!in_place) return;
  // x += y writes into x (views included), as torch; the result keeps x's dtype.
  const std::string inplace = "__i" + op + "__";
  cls.def(
      inplace.c_str(), [tt](Tensor& a, const Tensor& b) -> Tensor& { return a.copy_(tt(a, b)); }, py::is_operator(), nogil(),
      py::return_value_policy::reference_internal);
  cls.def(
      inplace.c_str(), [ts](Tensor& a, Scalar b) -> Tensor& { return a.copy_(ts(a, b)); }, py::is_operator(), nogil(),
      py::return_value_policy::reference_internal);
}

struct ValuesIndicesPy {
  Tensor values, indices;
};

Tensor reduce_all_or(const Tensor& x, const py::object& dim, bool keepdim, Tensor (*fn)(const Tensor&, const Axes&, bool)) {
  Axes axes = axes_arg(dim);
  py::gil_scoped_release nogil;
  return fn(x, axes, keepdim);
}

py::object max_like(const Tensor& x, const py::object& dim_or_other, bool keepdim, bool is_max) {
  if (dim_or_other.is_none()) {
    Tensor r;
    {
      py::gil_scoped_release nogil;
      r = is_max ? amax(x) : amin(x);
    }
    return py::cast(r);
  }
  if (py::isinstance<Tensor>(dim_or_other)) {
    const Tensor& o = dim_or_other.cast<const Tensor&>();
    return py::cast(is_max ? maximum(x, o) : minimum(x, o));
  }
  const auto dim = dim_or_other.cast<int64_t>();
  ValuesIndices r;
  {
    py::gil_scoped_release nogil;
    r = is_max ? max(x, dim, keepdim) : min(x, dim, keepdim);
  }
  return py::cast(ValuesIndicesPy{r.values, r.indices});
}

}  // namespace

void bind_ops(py::module_& m, py::class_<Tensor>& cls) {
  for (const UnaryOp& op : kUnaryOps) {
    m.def(op.name, op.fn, py::arg("input"), nogil());
    cls.def(op.name, op.fn, nogil());
  }
  for (const BinaryOp& op : kBinaryOps) bind_binary(m, cls, op.name, op.tt, op.ts, op.st);
  const auto op_named = [](std::string_view name) -> const BinaryOp& {
    for (const BinaryOp& op : kBinaryOps)
      if (name == op.name) return op;
    throw Error("python bindings: no binary op " + std::string(name));
  };
  for (const auto& [py_name, op_name] :
       {std::pair{"add", "add"}, std::pair{"sub", "sub"}, std::pair{"mul", "mul"}, std::pair{"truediv", "div"},
        std::pair{"floordiv", "floor_divide"}, std::pair{"mod", "remainder"}, std::pair{"pow", "pow"}, std::pair{"and", "bitwise_and"},
        std::pair{"or", "bitwise_or"}, std::pair{"xor", "bitwise_xor"}, std::pair{"lshift", "bitwise_left_shift"},
        std::pair{"rshift", "bitwise_right_shift"}}) {
    const BinaryOp& op = op_named(op_name);
    bind_operator(cls, py_name, op.tt, op.ts, op.st);
  }
  // Comparisons: tensor-scalar both ways round (2 < x is x > 2).
  const auto cmp = [&](const char* op, TT tt, TS ts) {
    cls.def(op, tt, py::is_operator(), nogil());
    cls.def(op, ts, py::is_operator(), nogil());
  };
  cmp("__eq__", py::overload_cast<const Tensor&, const Tensor&>(&eq), py::overload_cast<const Tensor&, Scalar>(&eq));
  cmp("__ne__", py::overload_cast<const Tensor&, const Tensor&>(&ne), py::overload_cast<const Tensor&, Scalar>(&ne));
  cmp("__lt__", py::overload_cast<const Tensor&, const Tensor&>(&lt), py::overload_cast<const Tensor&, Scalar>(&lt));
  cmp("__le__", py::overload_cast<const Tensor&, const Tensor&>(&le), py::overload_cast<const Tensor&, Scalar>(&le));
  cmp("__gt__", py::overload_cast<const Tensor&, const Tensor&>(&gt), py::overload_cast<const Tensor&, Scalar>(&gt));
  cmp("__ge__", py::overload_cast<const Tensor&, const Tensor&>(&ge), py::overload_cast<const Tensor&, Scalar>(&ge));
  cls.attr("__hash__") = py::none();
  cls.def("__hash__", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.impl_ptr().get()); });  // identity, as torch
  cls.def("__neg__", py::overload_cast<const Tensor&>(&neg), nogil());
  cls.def("__abs__", py::overload_cast<const Tensor&>(&tessera::abs), nogil());
  cls.def("__invert__", py::overload_cast<const Tensor&>(&bitwise_not), nogil());
  cls.def("__pos__", [](const Tensor& t) { return t; });
  cls.def("__matmul__", &matmul, py::is_operator(), nogil());
  cls.def(
      "__rmatmul__", [](const Tensor& b, const Tensor& a) { return matmul(a, b); }, py::is_operator(), nogil());
  cls.def(
      "add_", [](Tensor& a, const Tensor& b, double alpha) -> Tensor& { return alpha == 1 ? a.add_(b) : a.add_(mul(b, Scalar(alpha))); },
      py::arg("other"), py::kw_only(), py::arg("alpha") = 1.0, nogil(), py::return_value_policy::reference_internal);
  cls.def(
      "add_", [](Tensor& a, double b) -> Tensor& { return a.add_(b); }, nogil(), py::return_value_policy::reference_internal);
  cls.def(
      "sub_", [](Tensor& a, const Tensor& b) -> Tensor& { return a.sub_(b); }, nogil(), py::return_value_policy::reference_internal);
  cls.def(
      "sub_", [](Tensor& a, double b) -> Tensor& { return a.add_(-b); }, nogil(), py::return_value_policy::reference_internal);
  cls.def(
      "mul_", [](Tensor& a, const Tensor& b) -> Tensor& { return a.mul_(b); }, nogil(), py::return_value_policy::reference_internal);
  cls.def(
      "mul_", [](Tensor& a, double b) -> Tensor& { return a.mul_(b); }, nogil(), py::return_value_policy::reference_internal);
  cls.def(
      "div_", [](Tensor& a, const Tensor& b) -> Tensor& { return a.div_(b); }, nogil(), py::return_value_policy::reference_internal);
  cls.def(
      "div_", [](Tensor& a, double b) -> Tensor& { return a.mul_(1.0 / b); }, nogil(), py::return_value_policy::reference_internal);

  // ---- elementwise with options ----
  const auto gelu_fn = [](const Tensor& x, const std::string& approximate) {
    TESSERA_CHECK(approximate == "none" || approximate == "tanh", "gelu", "approximate must be 'none' or 'tanh', got '", approximate, "'");
    return gelu(x, approximate == "tanh");
  };
  m.def("gelu", gelu_fn, py::arg("input"), py::arg("approximate") = "none", nogil());
  cls.def("gelu", gelu_fn, py::arg("approximate") = "none", nogil());
  m.def(
      "softplus", [](const Tensor& x, double beta, double threshold) { return softplus(x, beta, threshold); }, py::arg("input"),
      py::arg("beta") = 1.0, py::arg("threshold") = 20.0, nogil());
  m.def("elu", &elu, py::arg("input"), py::arg("alpha") = 1.0, nogil());
  m.def("leaky_relu", &leaky_relu, py::arg("input"), py::arg("negative_slope") = 0.01, nogil());
  m.def("nan_to_num", &nan_to_num, py::arg("input"), py::arg("nan") = 0.0, py::arg("posinf") = py::none(), py::arg("neginf") = py::none(),
        nogil());
  m.def("where", py::overload_cast<const Tensor&, const Tensor&, const Tensor&>(&where), nogil());
  m.def("where", py::overload_cast<const Tensor&, const Tensor&, Scalar>(&where), nogil());
  m.def("where", py::overload_cast<const Tensor&, Scalar, const Tensor&>(&where), nogil());
  const auto clamp_fn = [](const Tensor& x, const py::object& lo, const py::object& hi) {
    if (py::isinstance<Tensor>(lo) || py::isinstance<Tensor>(hi)) {
      const double inf = std::numeric_limits<double>::infinity();
      Tensor l = lo.is_none() ? full_like(x, -inf) : py::isinstance<Tensor>(lo) ? lo.cast<Tensor>() : full_like(x, lo.cast<Scalar>());
      Tensor h = hi.is_none() ? full_like(x, inf) : py::isinstance<Tensor>(hi) ? hi.cast<Tensor>() : full_like(x, hi.cast<Scalar>());
      py::gil_scoped_release nogil;
      return clamp(x, l, h);
    }
    TESSERA_CHECK(!lo.is_none() || !hi.is_none(), "clamp", "at least one of min and max must be given");
    const double inf = std::numeric_limits<double>::infinity();
    Scalar l = lo.is_none() ? Scalar(-inf) : lo.cast<Scalar>(), h = hi.is_none() ? Scalar(inf) : hi.cast<Scalar>();
    py::gil_scoped_release nogil;
    return clamp(x, l, h);
  };
  m.def("clamp", clamp_fn, py::arg("input"), py::arg("min") = py::none(), py::arg("max") = py::none());
  cls.def("clamp", clamp_fn, py::arg("min") = py::none(), py::arg("max") = py::none());
  m.def("lerp", py::overload_cast<const Tensor&, const Tensor&, Scalar>(&lerp), nogil());
  m.def("lerp", py::overload_cast<const Tensor&, const Tensor&, const Tensor&>(&lerp), nogil());
  m.def("masked_fill", &masked_fill, py::arg("input"), py::arg("mask"), py::arg("value"), nogil());
  cls.def("masked_fill", &masked_fill, py::arg("mask"), py::arg("value"), nogil());
  m.def(
      "div", [](const Tensor& a, const Tensor& b, const std::string& mode) { return div(a, b, mode); }, py::arg("input"), py::arg("other"),
      py::kw_only(), py::arg("rounding_mode"), nogil());
  cls.def(
      "pow", [](const Tensor& x, double e) { return x.pow(e); }, nogil());

  // ---- reductions ----
  const auto reduction = [&](const char* name, Tensor (*fn)(const Tensor&, const Axes&, bool)) {
    m.def(
        name, [fn](const Tensor& x, const py::object& dim, bool keepdim) { return reduce_all_or(x, dim, keepdim, fn); }, py::arg("input"),
        py::arg("dim") = py::none(), py::arg("keepdim") = false);
    cls.def(
        name, [fn](const Tensor& x, const py::object& dim, bool keepdim) { return reduce_all_or(x, dim, keepdim, fn); },
        py::arg("dim") = py::none(), py::arg("keepdim") = false);
  };
  reduction("sum", &sum);
  reduction("mean", &mean);
  reduction("prod", &prod);
  reduction("amax", &amax);
  reduction("amin", &amin);
  reduction("logsumexp", &logsumexp);
  reduction("any", &any);
  reduction("all", &all);
  py::class_<ValuesIndicesPy>(m, "ValuesIndices")
      .def_readonly("values", &ValuesIndicesPy::values)
      .def_readonly("indices", &ValuesIndicesPy::indices)
      .def("__iter__", [](const ValuesIndicesPy& v) { return py::iter(py::make_tuple(v.values, v.indices)); })
      .def("__getitem__", [](const ValuesIndicesPy& v, int i) { return py::make_tuple(v.values, v.indices)[static_cast<size_t>(i)]; })
      .def("__len__", [](const ValuesIndicesPy&) { return 2; });
  for (bool is_max : {true, false}) {
    const char* name = is_max ? "max" : "min";
    m.def(
        name, [is_max](const Tensor& x, const py::object& d, bool k) { return max_like(x, d, k, is_max); }, py::arg("input"),
        py::arg("dim") = py::none(), py::arg("keepdim") = false);
    cls.def(
        name, [is_max](const Tensor& x, const py::object& d, bool k) { return max_like(x, d, k, is_max); }, py::arg("dim") = py::none(),
        py::arg("keepdim") = false);
  }
  const auto arg_fn = [](Tensor (*fn)(const Tensor&, std::optional<int64_t>, bool)) {
    return [fn](const Tensor& x, std::optional<int64_t> dim, bool keepdim) { return fn(x, dim, keepdim); };
  };
  m.def("argmax", arg_fn(&argmax), py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false, nogil());
  m.def("argmin", arg_fn(&argmin), py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false, nogil());
  cls.def("argmax", arg_fn(&argmax), py::arg("dim") = py::none(), py::arg("keepdim") = false, nogil());
  cls.def("argmin", arg_fn(&argmin), py::arg("dim") = py::none(), py::arg("keepdim") = false, nogil());
  const auto vi = [](ValuesIndices r) { return ValuesIndicesPy{r.values, r.indices}; };
  m.def(
      "sort", [vi](const Tensor& x, int64_t dim, bool descending) { return vi(sort(x, dim, descending)); }, py::arg("input"),
      py::arg("dim") = -1, py::arg("descending") = false, nogil());
  cls.def(
      "sort", [vi](const Tensor& x, int64_t dim, bool descending) { return vi(sort(x, dim, descending)); }, py::arg("dim") = -1,
      py::arg("descending") = false, nogil());
  m.def("argsort", &argsort, py::arg("input"), py::arg("dim") = -1, py::arg("descending") = false, nogil());
  m.def(
      "topk", [vi](const Tensor& x, int64_t k, int64_t dim, bool largest) { return vi(topk(x, k, dim, largest)); }, py::arg("input"),
      py::arg("k"), py::arg("dim") = -1, py::arg("largest") = true, nogil());
  cls.def(
      "topk", [vi](const Tensor& x, int64_t k, int64_t dim, bool largest) { return vi(topk(x, k, dim, largest)); }, py::arg("k"),
      py::arg("dim") = -1, py::arg("largest") = true, nogil());
  m.def(
      "cummax", [vi](const Tensor& x, int64_t dim) { return vi(cummax(x, dim)); }, py::arg("input"), py::arg("dim"), nogil());
  m.def(
      "cummin", [vi](const Tensor& x, int64_t dim) { return vi(cummin(x, dim)); }, py::arg("input"), py::arg("dim"), nogil());
  m.def("cumsum", &cumsum, py::arg("input"), py::arg("dim"), nogil());
  m.def("cumprod", &cumprod, py::arg("input"), py::arg("dim"), nogil());
  cls.def("cumsum", &cumsum, py::arg("dim"), nogil());
  const auto var_like = [](bool is_std) {
    return [is_std](const Tensor& x, const py::object& dim, int64_t correction, bool keepdim) {
      Axes axes = axes_arg(dim);
      py::gil_scoped_release nogil;
      return is_std ? tessera::std(x, axes, correction, keepdim) : var(x, axes, correction, keepdim);
    };
  };
  m.def("var", var_like(false), py::arg("input"), py::arg("dim") = py::none(), py::kw_only(), py::arg("correction") = 1,
        py::arg("keepdim") = false);
  m.def("std", var_like(true), py::arg("input"), py::arg("dim") = py::none(), py::kw_only(), py::arg("correction") = 1,
        py::arg("keepdim") = false);
  cls.def("var", var_like(false), py::arg("dim") = py::none(), py::kw_only(), py::arg("correction") = 1, py::arg("keepdim") = false);
  cls.def("std", var_like(true), py::arg("dim") = py::none(), py::kw_only(), py::arg("correction") = 1, py::arg("keepdim") = false);
  const auto norm_fn = [](const Tensor& x, double p, const py::object& dim, bool keepdim) {
    Axes axes = axes_arg(dim);
    py::gil_scoped_release nogil;
    return norm(x, p, axes, keepdim);
  };
  m.def("norm", norm_fn, py::arg("input"), py::arg("p") = 2.0, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  cls.def("norm", norm_fn, py::arg("p") = 2.0, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def("softmax", &softmax, py::arg("input"), py::arg("dim"), nogil());
  m.def("log_softmax", &log_softmax, py::arg("input"), py::arg("dim"), nogil());
  cls.def("softmax", &softmax, py::arg("dim"), nogil());
  cls.def("log_softmax", &log_softmax, py::arg("dim"), nogil());

  // ---- shape ops, linear algebra, indexing ----
  m.def("cat", &cat, py::arg("tensors"), py::arg("dim") = 0, nogil());
  m.def("concat", &cat, py::arg("tensors"), py::arg("dim") = 0, nogil());
  m.def("stack", &stack, py::arg("tensors"), py::arg("dim") = 0, nogil());
  m.def(
      "split",
      [](const Tensor& x, const py::object& size, int64_t dim) {
        if (py::isinstance<py::int_>(size)) return split(x, size.cast<int64_t>(), dim);
        return split(x, size.cast<std::vector<int64_t>>(), dim);
      },
      py::arg("tensor"), py::arg("split_size_or_sections"), py::arg("dim") = 0);
  m.def("chunk", &chunk, py::arg("input"), py::arg("chunks"), py::arg("dim") = 0, nogil());
  m.def("broadcast_to", &broadcast_to, py::arg("input"), py::arg("size"), nogil());
  m.def(
      "reshape", [](const Tensor& x, const Shape& s) { return x.reshape(s); }, py::arg("input"), py::arg("shape"), nogil());
  m.def(
      "permute", [](const Tensor& x, const Shape& s) { return x.permute(s); }, py::arg("input"), py::arg("dims"), nogil());
  m.def(
      "transpose", [](const Tensor& x, int64_t a, int64_t b) { return x.transpose(a, b); }, py::arg("input"), py::arg("dim0"),
      py::arg("dim1"));
  m.def(
      "flatten", [](const Tensor& x, int64_t a, int64_t b) { return x.flatten(a, b); }, py::arg("input"), py::arg("start_dim") = 0,
      py::arg("end_dim") = -1);
  m.def(
      "squeeze", [](const Tensor& x, std::optional<int64_t> d) { return d ? x.squeeze(*d) : x.squeeze(); }, py::arg("input"),
      py::arg("dim") = py::none());
  m.def(
      "unsqueeze", [](const Tensor& x, int64_t d) { return x.unsqueeze(d); }, py::arg("input"), py::arg("dim"));
  m.def("matmul", &matmul, py::arg("input"), py::arg("other"), nogil());
  cls.def("matmul", &matmul, py::arg("other"), nogil());
  m.def("mm", &matmul, py::arg("input"), py::arg("mat2"), nogil());
  m.def("bmm", &matmul, py::arg("input"), py::arg("mat2"), nogil());
  m.def("einsum", [](const std::string& eq, const py::args& ops) {
    std::vector<Tensor> ts =
        ops.size() == 1 && !py::isinstance<Tensor>(ops[0]) ? ops[0].cast<std::vector<Tensor>>() : ops.cast<std::vector<Tensor>>();
    py::gil_scoped_release nogil;
    return einsum(eq, ts);
  });
  m.def("index_select", &index_select, py::arg("input"), py::arg("dim"), py::arg("index"), nogil());
  cls.def("index_select", &index_select, py::arg("dim"), py::arg("index"), nogil());
  m.def("gather", &gather, py::arg("input"), py::arg("dim"), py::arg("index"), nogil());
  cls.def("gather", &gather, py::arg("dim"), py::arg("index"), nogil());
  m.def("scatter_add", &scatter_add, py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("src"), nogil());
  m.def("scatter", &scatter, py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("src"), nogil());
  m.def(
      "scatter_reduce",
      [](const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce, bool include_self) {
        const ScatterReduce r = reduce == "sum"    ? ScatterReduce::sum
                                : reduce == "mean" ? ScatterReduce::mean
                                : reduce == "prod" ? ScatterReduce::prod
                                : reduce == "amax" ? ScatterReduce::amax
                                : reduce == "amin"
                                    ? ScatterReduce::amin
                                    : throw Error("scatter_reduce: reduce must be sum, mean, prod, amax or amin, got '" + reduce + "'");
        return scatter_reduce(x, dim, index, src, r, include_self);
      },
      py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("src"), py::arg("reduce"), py::kw_only(), py::arg("include_self") = true,
      nogil());
  m.def(
      "take_along_dim", [](const Tensor& x, const Tensor& i, int64_t d) { return take_along_axis(x, i, d); }, py::arg("input"),
      py::arg("indices"), py::arg("dim"), nogil());
  m.def(
      "take_along_axis", [](const Tensor& x, const Tensor& i, int64_t d) { return take_along_axis(x, i, d); }, py::arg("input"),
      py::arg("indices"), py::arg("dim"), nogil());
  m.def("cast", &cast, py::arg("input"), py::arg("dtype"), nogil());
  cls.def(
      "scatter_add_",
      [](Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) -> Tensor& { return scatter_add_(x, dim, index, src); },
      py::arg("dim"), py::arg("index"), py::arg("src"), nogil(), py::return_value_policy::reference_internal);
  cls.def(
      "where", [](const Tensor& x, const Tensor& cond, const Tensor& other) { return where(cond, x, other); }, py::arg("condition"),
      py::arg("other"), nogil());
  m.def("index_put", &index_put, py::arg("input"), py::arg("indices"), py::arg("values"), py::arg("accumulate") = false, nogil());
  m.def("index_add", &index_add, py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("source"), py::kw_only(),
        py::arg("alpha") = 1.0, nogil());
}

}  // namespace tessera::python
