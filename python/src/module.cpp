// tessera._C: the extension module the `tessera` Python package wraps.
#include "bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "Tessera: one tensor engine over CPU, CUDA, HIP and Kokkos (the C++ core of the tessera package)";
  using namespace tessera::python;
  bind_types(m);
  bind_tensor(m);
  bind_runtime(m);
  py::module_ nn = m.def_submodule("nn");
  bind_nn(nn);
  py::module_ functional = nn.def_submodule("functional");
  bind_nn_functional(functional);
  bind_optim(m);
  m.attr("__version__") = TESSERA_PY_VERSION;
}
