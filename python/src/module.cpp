// The extension module mosaic._mosaic; the package mosaic (mosaic/__init__.py) is its public face.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "api/mosaic.hpp"
#include "bridge.hpp"

namespace mosaic::python {
void bind_commands(py::module_& m);
void bind_optimizers(py::module_& m);
void bind_operators(py::module_& m);
}  // namespace mosaic::python

PYBIND11_MODULE(_mosaic, m) {
  namespace py = pybind11;
  using namespace mosaic::python;
  m.doc() = "Mosaic's library API (api/mosaic.hpp) for Python; import mosaic, not this module.";
  register_exceptions(m);
  m.def("version", &mosaic::api::version, "The version of the Mosaic library this module runs.");
  m.def(
      "backends",
      [](bool available) {
        return available ? mosaic::builtin_registry().available_backends() : mosaic::builtin_registry().backends();
      },
      py::arg("available") = false,
      "The registered backends: built-ins, then what loaded plugins added; available=True: only those that can "
      "run here (what backend='all' means: the cuda backend without a GPU cannot).");
  m.def(
      "load_plugin",
      [](const std::string& path) {
        mosaic::Status st = mosaic::load_plugin(path);
        if (!st.is_ok()) raise_status(st);
      },
      py::arg("path"), "Loads an operator/backend plugin (a C++ shared library, backends/plugin.hpp).");
  m.def(
      "load_optimizer_plugin",
      [](const std::string& path) {
        auto r = mosaic::load_optimizer_plugin(path);
        if (!r.ok()) raise_status(r.status());
        return r.value();
      },
      py::arg("path"), "Loads a C++ optimizer plugin; returns the optimizer's name.");
  bind_commands(m);
  bind_optimizers(m);
  bind_operators(m);
}
