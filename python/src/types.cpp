// Scalars, dtypes, devices, generators and exceptions as Python sees them.
#include <sstream>

#include "bindings.h"

namespace pybind11::detail {
bool type_caster<tessera::Scalar>::load(handle src, bool convert) {
  PyObject* o = src.ptr();
  if (PyBool_Check(o)) {
    value = tessera::Scalar(o == Py_True);
    return true;
  }
  if (PyFloat_Check(o)) {
    value = tessera::Scalar(PyFloat_AsDouble(o));
    return true;
  }
  if (PyLong_Check(o) || (convert && PyIndex_Check(o) && !PyObject_HasAttrString(o, "_tessera_tensor"))) {
    const long long v = PyLong_Check(o) ? PyLong_AsLongLong(o) : [&] {
      object idx = reinterpret_steal<object>(PyNumber_Index(o));
      return idx ? PyLong_AsLongLong(idx.ptr()) : -1LL;
    }();
    if (PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    value = tessera::Scalar(static_cast<int64_t>(v));
    return true;
  }
  // NumPy float scalars (float32, float16) and 0-d arrays: anything with __float__ that is not a tensor.
  if (convert && PyObject_HasAttrString(o, "dtype") && !PyObject_HasAttrString(o, "_tessera_tensor") &&
      PyObject_HasAttrString(o, "__float__") && PyObject_Size(o) == -1) {
    PyErr_Clear();
    const double d = PyFloat_AsDouble(o);
    if (PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    value = tessera::Scalar(d);
    return true;
  }
  return false;
}
}  // namespace pybind11::detail

namespace tessera::python {

std::vector<int64_t> axes_arg(const py::object& axes) {
  if (axes.is_none()) return {};
  if (py::isinstance<py::int_>(axes)) return {axes.cast<int64_t>()};
  return axes.cast<std::vector<int64_t>>();
}

Shape shape_arg(const py::args& args, const py::object& size) {
  if (!size.is_none()) {
    if (args.size() != 0) throw Error("tessera: give the sizes either as arguments or as size=, not both");
    if (py::isinstance<py::int_>(size)) return {size.cast<int64_t>()};
    return size.cast<Shape>();
  }
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0])) return args[0].cast<Shape>();
  return args.cast<Shape>();
}

DType dtype_arg(const py::object& dtype, DType fallback) {
  if (dtype.is_none()) return fallback;
  if (py::isinstance<py::str>(dtype)) return parse_dtype(dtype.cast<std::string>());
  if (py::isinstance<DType>(dtype)) return dtype.cast<DType>();
  // NumPy and PyTorch dtypes print as their names ("float32", "torch.float32").
  std::string name = py::str(dtype);
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  if (name == "bool_") name = "bool";
  return parse_dtype(name);
}

Device device_arg(const py::object& device) {
  if (device.is_none()) return kCPU;
  if (py::isinstance<Device>(device)) return device.cast<Device>();
  return Device::parse(py::str(device).cast<std::string>());
}

Reduction reduction_arg(const std::string& name) {
  if (name == "mean") return Reduction::mean;
  if (name == "sum") return Reduction::sum;
  if (name == "none") return Reduction::none;
  throw Error("reduction: expected 'mean', 'sum' or 'none', got '" + name + "'");
}

void bind_types(py::module_& m) {
  // Exceptions: tessera.Error is a RuntimeError (as torch's errors are); the two refinements
  // derive from it so `except tessera.Error` catches everything the engine throws.
  static py::exception<Error> error(m, "Error", PyExc_RuntimeError);
  static py::exception<OutOfMemory> oom(m, "OutOfMemoryError", error.ptr());
  static py::exception<NotImplemented> notimpl(m, "NotImplementedError", error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const OutOfMemory& e) {
      PyErr_SetString(oom.ptr(), e.what());
    } catch (const NotImplemented& e) {
      PyErr_SetString(notimpl.ptr(), e.what());
    } catch (const Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });

  py::enum_<DType> dt(m, "dtype");
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto d = static_cast<DType>(i);
    dt.value(dtype_name(d), d);
  }
  dt.def(py::init([](const std::string& name) { return parse_dtype(name); }))
      .def_property_readonly("itemsize", [](DType d) { return itemsize(d); })
      .def_property_readonly("is_floating_point", [](DType d) { return is_floating(d); });
  // Replaced rather than added: enum_ already defines both, and a second def would only overload.
  const auto dtype_repr = [](DType d) { return std::string("tessera.") + dtype_name(d); };
  dt.attr("__repr__") = py::cpp_function(dtype_repr, py::name("__repr__"), py::is_method(dt));
  dt.attr("__str__") = py::cpp_function(dtype_repr, py::name("__str__"), py::is_method(dt));
  py::implicitly_convertible<py::str, DType>();
  for (int i = 0; i < kNumDTypes; ++i) m.attr(dtype_name(static_cast<DType>(i))) = static_cast<DType>(i);
  m.attr("float") = DType::f32;
  m.attr("double") = DType::f64;
  m.attr("half") = DType::f16;
  m.attr("long") = DType::i64;
  m.attr("int") = DType::i32;
  m.def("promote_types", &promote_types);

  py::class_<Device>(m, "device")
      .def(py::init([](const std::string& text) { return Device::parse(text); }), py::arg("spec"))
      .def(py::init([](const std::string& type, int index) { return Device::parse(type + ":" + std::to_string(index)); }), py::arg("type"),
           py::arg("index"))
      .def_property_readonly("type", [](const Device& d) { return std::string(device_type_name(d.type)); })
      .def_property_readonly("index", [](const Device& d) { return d.index; })
      .def("__str__", &Device::str)
      .def("__repr__",
           [](const Device& d) {
             return "device(type='" + std::string(device_type_name(d.type)) + "', index=" + std::to_string(d.index) + ")";
           })
      .def("__eq__",
           [](const Device& a, const py::object& b) {
             return py::isinstance<py::str>(b) || py::isinstance<Device>(b) ? a == device_arg(b) : false;
           })
      .def("__hash__", [](const Device& d) { return std::hash<std::string>()(d.str()); });
  py::implicitly_convertible<py::str, Device>();

  py::class_<Generator>(m, "Generator")
      .def(py::init<uint64_t>(), py::arg("seed") = 0)
      .def(
          "manual_seed",
          [](Generator& g, uint64_t s) -> Generator& {
            g.manual_seed(s);
            return g;
          },
          py::return_value_policy::reference)
      .def("initial_seed", &Generator::seed)
      .def_property("offset", &Generator::offset, &Generator::set_offset);
  m.def(
      "manual_seed", [](uint64_t seed) { manual_seed(seed); }, py::arg("seed"));
  m.def("default_generator", &default_generator, py::return_value_policy::reference);
}

}  // namespace tessera::python
