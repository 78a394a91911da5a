// tessera.Tensor: properties, views, conversions, in-place updates and autograd.
#include <memory>

#include "bindings.h"

namespace tessera::python {
namespace {

/** A Python callable kept by C++ (a hook) whose last reference may drop without the GIL. */
std::shared_ptr<py::function> keep_callable(py::function fn) {
  return {new py::function(std::move(fn)), [](py::function* f) {
            py::gil_scoped_acquire gil;
            delete f;
          }};
}

py::object item_of(const Tensor& t) {
  const DType d = t.dtype();
  Tensor one;
  {
    py::gil_scoped_release nogil;
    TESSERA_CHECK(t.numel() == 1, "item", "a Tensor with ", t.numel(), " elements cannot be converted to a Python scalar");
    one = t.to(kCPU);
  }
  if (d == DType::boolean) return py::bool_(one.item<bool>());
  if (is_integer(d)) return py::int_(one.item<int64_t>());
  return py::float_(one.item<double>());
}

py::object nested_list(const std::vector<double>& v, const Shape& shape, size_t axis, int64_t& pos, DType d) {
  if (axis == shape.size()) {
    const double x = v[static_cast<size_t>(pos++)];
    if (d == DType::boolean) return py::bool_(x != 0);
    if (is_integer(d)) return py::int_(static_cast<int64_t>(x));
    return py::float_(x);
  }
  py::list out;
  for (int64_t i = 0; i < shape[axis]; ++i) out.append(nested_list(v, shape, axis + 1, pos, d));
  return out;
}

bool looks_like_device(const py::object& o) {
  if (py::isinstance<Device>(o)) return true;
  if (!py::isinstance<py::str>(o)) return false;
  const std::string s = o.cast<std::string>();
  for (const char* p : {"cpu", "cuda", "hip", "kokkos", "emulated"})
    if (s.rfind(p, 0) == 0) return true;
  return false;
}

Tensor to_any(const Tensor& t, const py::object& a, const py::object& b, const py::object& dtype, const py::object& device) {
  std::optional<Device> dev;
  std::optional<DType> dt;
  for (const py::object* o : {&a, &b}) {
    if (o->is_none()) continue;
    if (py::isinstance<Tensor>(*o)) {
      const Tensor& other = o->cast<const Tensor&>();
      dev = other.device();
      dt = other.dtype();
    } else if (looks_like_device(*o)) {
      dev = device_arg(*o);
    } else {
      dt = dtype_arg(*o);
    }
  }
  if (!device.is_none()) dev = device_arg(device);
  if (!dtype.is_none()) dt = dtype_arg(dtype);
  py::gil_scoped_release nogil;
  // As torch's .to: the same tensor back when nothing changes.
  if ((!dev || *dev == t.device()) && (!dt || *dt == t.dtype())) return t;
  return t.to(dev.value_or(t.device()), dt.value_or(t.dtype()));
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::class_<Tensor> cls(m, "Tensor");
  cls.attr("_tessera_tensor") = true;
  cls.def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def(
          "size",
          [](const Tensor& t, const py::object& dim) -> py::object {
            if (dim.is_none()) return py::tuple(py::cast(t.shape()));
            return py::int_(t.size(dim.cast<int64_t>()));
          },
          py::arg("dim") = py::none())
      .def(
          "stride",
          [](const Tensor& t, const py::object& dim) -> py::object {
            if (dim.is_none()) return py::tuple(py::cast(t.strides()));
            return py::int_(t.stride(dim.cast<int64_t>()));
          },
          py::arg("dim") = py::none())
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("device", &Tensor::device)
      .def_property_readonly("ndim", &Tensor::dim)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("element_size", &Tensor::itemsize)
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); })
      .def_property_readonly("is_floating_point", [](const Tensor& t) { return is_floating(t.dtype()); })
      .def("__len__",
           [](const Tensor& t) {
             TESSERA_CHECK(t.dim() > 0, "len", "len() of a 0-d tensor");
             return t.size(0);
           })
      .def("__repr__", &Tensor::str, nogil())
      .def("item", &item_of)
      .def("__float__", [](const Tensor& t) { return item_of(t).cast<double>(); })
      .def("__int__", [](const Tensor& t) { return item_of(t).cast<int64_t>(); })
      .def("__bool__",
           [](const Tensor& t) {
             TESSERA_CHECK(t.numel() == 1, "bool", "the truth value of a Tensor with ", t.numel(), " elements is ambiguous");
             return item_of(t).cast<double>() != 0;
           })
      .def("tolist",
           [](const Tensor& t) {
             std::vector<double> v;
             {
               py::gil_scoped_release nogil;
               v = t.to_vector<double>();
             }
             int64_t pos = 0;
             return nested_list(v, t.shape(), 0, pos, t.dtype());
           })
      // ---- views ----
      .def("view", [](const Tensor& t, const py::args& a) { return t.view(shape_arg(a, py::none())); })
      .def("reshape", [](const Tensor& t, const py::args& a) { return t.reshape(shape_arg(a, py::none())); })
      .def("expand",
           [](const Tensor& t, const py::args& a) {
             Shape s = shape_arg(a, py::none());
             // -1 keeps the size, as torch's expand.
             const size_t lead = s.size() - std::min(s.size(), t.shape().size());
             for (size_t i = lead; i < s.size(); ++i)
               if (s[i] == -1) s[i] = t.shape()[i - lead];
             return t.expand(s);
           })
      .def("permute", [](const Tensor& t, const py::args& a) { return t.permute(shape_arg(a, py::none())); })
      .def("transpose", &Tensor::transpose, py::arg("dim0"), py::arg("dim1"))
      .def("t", [](const Tensor& t) { return t.dim() < 2 ? t : t.transpose(0, 1); })
      .def_property_readonly("T",
                             [](const Tensor& t) {
                               std::vector<int64_t> order(static_cast<size_t>(t.dim()));
                               for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(order.size() - 1 - i);
                               return t.permute(order);
                             })
      .def_property_readonly("mT", &Tensor::mT)
      .def("narrow", &Tensor::narrow, py::arg("dim"), py::arg("start"), py::arg("length"))
      .def("select", &Tensor::select, py::arg("dim"), py::arg("index"))
      .def(
          "squeeze", [](const Tensor& t, const py::object& dim) { return dim.is_none() ? t.squeeze() : t.squeeze(dim.cast<int64_t>()); },
          py::arg("dim") = py::none())
      .def("unsqueeze", &Tensor::unsqueeze, py::arg("dim"))
      .def("flatten", &Tensor::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1)
      // ---- copies and conversions ----
      .def("contiguous", &Tensor::contiguous, nogil())
      .def("clone", &Tensor::clone, nogil())
      .def("to", &to_any, py::arg("a") = py::none(), py::arg("b") = py::none(), py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("device") = py::none())
      .def(
          "cpu", [](const Tensor& t) { return t.device() == kCPU ? t : t.to(kCPU); }, nogil())
      .def(
          "type", [](const Tensor& t, const py::object& dtype) { return t.to(dtype_arg(dtype)); }, py::arg("dtype"))
      // ---- in-place ----
      .def(
          "fill_", [](Tensor& t, double v) -> Tensor& { return t.fill_(v); }, py::return_value_policy::reference_internal, nogil())
      .def(
          "zero_", [](Tensor& t) -> Tensor& { return t.zero_(); }, py::return_value_policy::reference_internal, nogil())
      .def(
          "copy_", [](Tensor& t, const Tensor& s) -> Tensor& { return t.copy_(s); }, py::return_value_policy::reference_internal, nogil())
      // ---- autograd ----
      .def_property("requires_grad", &Tensor::requires_grad, [](Tensor& t, bool on) { t.set_requires_grad(on); })
      .def(
          "requires_grad_", [](Tensor& t, bool on) -> Tensor& { return t.set_requires_grad(on); }, py::arg("requires_grad") = true,
          py::return_value_policy::reference_internal)
      .def_property(
          "grad",
          [](const Tensor& t) -> py::object {
            Tensor g = t.grad();
            return g.defined() ? py::cast(g) : py::none();
          },
          [](const Tensor& t, const py::object& g) { t.set_grad(g.is_none() ? Tensor() : g.cast<Tensor>()); })
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property_readonly("grad_fn",
                             [](const Tensor& t) -> py::object {
                               const std::string n = t.grad_fn_name();
                               return n.empty() ? py::object(py::none()) : py::object(py::str(n));
                             })
      .def(
          "backward",
          [](const Tensor& t, const py::object& gradient, bool retain_graph) {
            Tensor g = gradient.is_none() ? Tensor() : gradient.cast<Tensor>();
            py::gil_scoped_release nogil;
            t.backward(g, retain_graph);
          },
          py::arg("gradient") = py::none(), py::arg("retain_graph") = false)
      .def("detach", &Tensor::detach)
      .def("retain_grad", &Tensor::retain_grad)
      .def("register_hook", [](const Tensor& t, py::function fn) {
        auto kept = keep_callable(std::move(fn));
        t.register_hook([kept](const Tensor& g) {
          py::gil_scoped_acquire gil;
          py::object r = (*kept)(g);
          return r.is_none() ? Tensor() : r.cast<Tensor>();
        });
      });
  // t.float(), t.half(), ...: the tensor itself when it has the dtype already, as torch.
  for (const auto& [method, dt] :
       {std::pair{"float", DType::f32}, std::pair{"double", DType::f64}, std::pair{"half", DType::f16}, std::pair{"bfloat16", DType::bf16},
        std::pair{"long", DType::i64}, std::pair{"int", DType::i32}, std::pair{"bool", DType::boolean}}) {
    cls.def(
        method, [dt](const Tensor& t) { return t.dtype() == dt ? t : t.to(dt); }, nogil());
  }
  bind_indexing(cls);
  bind_interop(m, cls);
  bind_ops(m, cls);
}

}  // namespace tessera::python
