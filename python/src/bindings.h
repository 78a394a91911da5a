#pragma once
// Shared pieces of the `tessera._C` extension: how Python numbers become Scalars, how axes,
// sizes, dtypes and devices are read from Python values, and the binders each file provides.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <vector>

#include "tessera/tessera.h"

namespace py = pybind11;

namespace pybind11::detail {
/** Python bool/int/float (and NumPy integer or float scalars) as a weakly typed tessera::Scalar. */
template <>
struct type_caster<tessera::Scalar> {
  std::optional<tessera::Scalar> value;
  static constexpr auto name = const_name("float | int | bool");
  bool load(handle src, bool convert);
  static handle cast(const tessera::Scalar& s, return_value_policy, handle) {
    return s.is_integral() ? PyLong_FromLongLong(s.to_int()) : PyFloat_FromDouble(s.to_double());
  }
  operator tessera::Scalar&() { return *value; }
  template <typename T>
  using cast_op_type = tessera::Scalar&;
};
}  // namespace pybind11::detail

namespace tessera::python {

/** The GIL is released around every call into the engine: Python threads (a data loader, a
 *  second model) run while kernels do. */
using nogil = py::call_guard<py::gil_scoped_release>;

/** None -> all axes, an int -> one, a sequence -> those. */
std::vector<int64_t> axes_arg(const py::object& axes);
/** Sizes given as (2, 3), [2, 3] or 2, 3 (the *size of torch.zeros). */
Shape shape_arg(const py::args& args, const py::object& size);
/** A dtype given as tessera.float32, "float32" or "f32"; None -> `fallback`. */
DType dtype_arg(const py::object& dtype, DType fallback = DType::f32);
/** A device given as tessera.device, "cuda:1" or None (-> cpu). */
Device device_arg(const py::object& device);
/** PyTorch's enum strings ("mean", "sum", "none"). */
Reduction reduction_arg(const std::string& name);

void bind_types(py::module_& m);
void bind_tensor(py::module_& m);
void bind_indexing(py::class_<Tensor>& cls);
void bind_interop(py::module_& m, py::class_<Tensor>& cls);
void bind_ops(py::module_& m, py::class_<Tensor>& cls);
void bind_nn_functional(py::module_& m);
void bind_nn(py::module_& m);
void bind_optim(py::module_& m);
void bind_runtime(py::module_& m);

}  // namespace tessera::python
