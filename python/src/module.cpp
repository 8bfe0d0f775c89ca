// _native: the C++ half of the meshstore Python package. The package's
// Python modules are the API; this module holds the store, futures and
// tensors they are built on.

#include <pybind11/pybind11.h>

#include "meshstore/version.hpp"
#include "py_future.hpp"
#include "tensor_bridge.hpp"

namespace meshstore::python {
void bind_store(py::module_& m);
void bind_safetensors(py::module_& m);
void bind_actors(py::module_& m);
void bind_ports(py::module_& m);
}  // namespace meshstore::python

PYBIND11_MODULE(_native, m) {
  namespace mp = meshstore::python;
  m.doc() = "meshstore's native core (use the meshstore package, not this module)";
  mp::note_main_thread();
  mp::bind_future(m);
  mp::bind_tensor(m);
  mp::bind_store(m);
  mp::bind_safetensors(m);
  mp::bind_actors(m);
  mp::bind_ports(m);
  m.attr("__version__") = MESHSTORE_VERSION_STRING;
}
