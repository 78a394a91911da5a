// Memory shared with NumPy and PyTorch: both directions go through DLPack capsules, so
// tessera.from_numpy(a), t.numpy() and torch.utils.dlpack round trips never copy.
#include <pybind11/numpy.h>

#include "bindings.h"
#include "tessera/dlpack.h"

namespace tessera::python {
using namespace pybind11::literals;
namespace {

void capsule_destructor(PyObject* cap) {
  // Unconsumed capsules still own the tensor; a consumer renames them "used_dltensor".
  if (!PyCapsule_IsValid(cap, "dltensor")) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

py::object to_capsule(const Tensor& t) {
  DLManagedTensor* managed = nullptr;
  {
    py::gil_scoped_release nogil;
    if (t.device() != kCPU) synchronize(t.device());  // the consumer reads on its own stream
    managed = to_dlpack(t);
  }
  PyObject* cap = PyCapsule_New(managed, "dltensor", &capsule_destructor);
  if (cap == nullptr) {
    managed->deleter(managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(cap);
}

Tensor from_capsule_or_producer(const py::object& obj) {
  py::object cap = py::hasattr(obj, "__dlpack__") ? obj.attr("__dlpack__")() : obj;
  TESSERA_CHECK(PyCapsule_CheckExact(cap.ptr()), "from_dlpack", "expected an object with __dlpack__ or a DLPack capsule, got ",
                std::string(py::str(py::type::handle_of(obj))));
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  if (managed == nullptr) {
    PyErr_Clear();
    throw Error("from_dlpack: the capsule was already consumed (a DLPack capsule can be imported once)");
  }
  PyCapsule_SetName(cap.ptr(), "used_dltensor");
  return from_dlpack(managed);  // owns `managed` from here, even when it throws
}

bool is_numpy_array(const py::object& o) {
  static py::object ndarray = py::module_::import("numpy").attr("ndarray");
  return py::isinstance(o, ndarray);
}

}  // namespace

Tensor from_numpy(const py::object& array) {
  TESSERA_CHECK(is_numpy_array(array), "from_numpy", "expected a numpy.ndarray, got ", std::string(py::str(py::type::handle_of(array))));
  TESSERA_CHECK(array.attr("flags").attr("writeable").cast<bool>(), "from_numpy",
                "the array is read-only; a tensor shares its memory and may write to it (pass a copy: a.copy())");
  const std::string kind = py::str(array.attr("dtype").attr("kind"));
  if (kind == "b") {  // DLPack 0.6 has no bool: share the bytes as uint8, then label them bool
    Tensor bytes = from_capsule_or_producer(array.attr("view")(py::module_::import("numpy").attr("uint8")));
    return detail::make_tensor(bytes.storage(), bytes.shape(), bytes.strides(), bytes.offset(), DType::boolean);
  }
  return from_capsule_or_producer(array);
}

Tensor tensor_from_py(const py::object& data, const py::object& dtype, Device device) {
  if (py::isinstance<Tensor>(data)) {
    const Tensor& t = data.cast<const Tensor&>();
    py::gil_scoped_release nogil;
    return t.detach().to(device, dtype_arg(dtype, t.dtype())).clone();
  }
  py::module_ np = py::module_::import("numpy");
  const bool was_array = is_numpy_array(data);
  py::object arr = np.attr("array")(data);  // a fresh, writable, C-contiguous copy
  const std::string kind = py::str(arr.attr("dtype").attr("kind"));
  TESSERA_CHECK(kind == "f" || kind == "i" || kind == "u" || kind == "b", "tensor", "cannot make a tensor from data of NumPy dtype ",
                std::string(py::str(arr.attr("dtype"))), " (numbers, bools or nested lists of them)");
  // Python floats default to float32 (torch's default dtype); NumPy arrays keep theirs.
  DType fallback = DType::f32;
  if (kind == "i" || kind == "u") fallback = was_array ? parse_dtype(std::string(py::str(arr.attr("dtype")))) : DType::i64;
  if (kind == "b") fallback = DType::boolean;
  if (kind == "f" && was_array) fallback = parse_dtype(std::string(py::str(arr.attr("dtype"))));
  if (kind == "i" && !was_array) arr = arr.attr("astype")(np.attr("int64"));
  Tensor host = from_numpy(arr);
  const DType dt = dtype_arg(dtype, fallback);
  py::gil_scoped_release nogil;
  Tensor out = host.to(device, dt);
  return out.is_same(host) ? host.clone() : out;
}

void bind_interop(py::module_& m, py::class_<Tensor>& cls) {
  cls.def(
         "__dlpack__", [](const Tensor& t, const py::object&) { return to_capsule(t); }, py::arg("stream") = py::none())
      .def("__dlpack_device__",
           [](const Tensor& t) {
             switch (t.device().type) {
               case DeviceType::cpu:
                 return py::make_tuple(static_cast<int>(kDLCPU), 0);
               case DeviceType::cuda:
                 return py::make_tuple(static_cast<int>(kDLCUDA), t.device().index);
               case DeviceType::hip:
                 return py::make_tuple(static_cast<int>(kDLROCM), t.device().index);
               default:
                 throw Error("__dlpack_device__: DLPack has no device type for " + t.device().str() + " (move the tensor to cpu first)");
             }
           })
      .def(
          "numpy",
          [](const Tensor& t, bool force) -> py::object {
            Tensor src = t;
            if (force) src = t.detach().to(kCPU);
            TESSERA_CHECK(!src.requires_grad(), "numpy", "can't call numpy() on a tensor that requires grad; use tensor.detach().numpy()");
            TESSERA_CHECK(src.device() == kCPU, "numpy", "can't convert a ", src.device().str(),
                          " tensor to NumPy; use tensor.cpu() first");
            TESSERA_CHECK(src.dtype() != DType::bf16, "numpy", "NumPy has no bfloat16; convert first (tensor.float())");
            // A writable array over the tensor's memory (NumPy 1.x's from_dlpack gives read-only
            // ones); the capsule base keeps the storage alive as long as the array.
            const auto item = static_cast<py::ssize_t>(src.itemsize());
            std::vector<py::ssize_t> shape(src.shape().begin(), src.shape().end()), strides;
            for (int64_t st : src.strides()) strides.push_back(st * item);
            auto* keep = new std::shared_ptr<Storage>(src.storage());
            py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<Storage>*>(p); });
            const py::dtype dt(src.dtype() == DType::boolean ? std::string("bool") : std::string(dtype_name(src.dtype())));
            return py::array(dt, shape, strides, src.data_ptr(), base);
          },
          py::arg("force") = false)
      .def(
          "__array__",
          [](const Tensor& t, const py::object& dtype) {
            py::object arr = py::cast(t).attr("numpy")(true);
            return dtype.is_none() ? arr : arr.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none());
  m.def("from_numpy", &from_numpy, py::arg("ndarray"), "A tensor sharing the array's memory (as torch.from_numpy).");
  m.def("from_dlpack", &from_capsule_or_producer, py::arg("ext_tensor"),
        "A tensor sharing the memory of any DLPack producer (a torch tensor, a NumPy array, a capsule).");
  m.def(
      "to_dlpack", [](const Tensor& t) { return to_capsule(t); }, py::arg("tensor"));
  m.def(
      "tensor",
      [](const py::object& data, const py::object& dtype, const py::object& device, bool requires_grad) {
        Tensor t = tensor_from_py(data, dtype, device_arg(device));
        if (requires_grad) t.set_requires_grad(true);
        return t;
      },
      py::arg("data"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("requires_grad") = false);
  m.def(
      "as_tensor",
      [](const py::object& data, const py::object& dtype, const py::object& device) {
        if (py::isinstance<Tensor>(data))
          return py::cast(data.cast<const Tensor&>())
              .attr("to")(py::none(), py::none(), "dtype"_a = dtype, "device"_a = device)
              .cast<Tensor>();
        if (is_numpy_array(data) && dtype.is_none() && (device.is_none() || device_arg(device) == kCPU) &&
            data.attr("flags").attr("writeable").cast<bool>() && data.attr("flags").attr("c_contiguous").cast<bool>())
          return from_numpy(data);
        return tensor_from_py(data, dtype, device_arg(device));
      },
      py::arg("data"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());
}

}  // namespace tessera::python
