// libmosaic_python_host.so: Python files as plugins of the CLI (core/python_host.hpp). Loaded
// by a process that already holds Mosaic (the CLI, whose symbols this library's bindings
// resolve against: it links nothing of Mosaic's), it starts an interpreter once, binds the
// package mosaic (beside this library) to that Mosaic, and runs the file through
// mosaic._load_python_plugin.
#include <dlfcn.h>
#include <pybind11/embed.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>

namespace py = pybind11;

extern "C" PyObject* PyInit__mosaic();

namespace {

void write(char* out, size_t size, const std::string& text) {
  if (size == 0) return;
  const size_t n = std::min(text.size(), size - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int mosaic_python_host_run(const char* file, const char* kind,
                                                                             char* out, size_t out_size) {
  static std::once_flag started;
  std::call_once(started, [] {
    if (Py_IsInitialized()) return;
    py::initialize_interpreter(/*init_signal_handlers=*/false);  // Ctrl-C stays the CLI's
    PyEval_SaveThread();  // the kernels and optimizers take the GIL when they run
  });
  py::gil_scoped_acquire gil;
  try {
    py::dict modules = py::module_::import("sys").attr("modules");
    if (!modules.contains("mosaic._mosaic")) {
      Dl_info self{};
      dladdr(reinterpret_cast<void*>(&mosaic_python_host_run), &self);
      const std::string dir = std::filesystem::path(self.dli_fname ? self.dli_fname : ".").parent_path().string();
      py::module_::import("sys").attr("path").attr("insert")(0, dir);
      PyObject* raw = PyInit__mosaic();
      if (!raw) throw py::error_already_set();
      modules["mosaic._mosaic"] = py::reinterpret_steal<py::object>(raw);
    }
    py::object names = py::module_::import("mosaic").attr("_load_python_plugin")(file, kind);
    std::string joined;
    for (py::handle n : names) joined += (joined.empty() ? "" : ",") + py::str(n).cast<std::string>();
    write(out, out_size, joined);
    return 0;
  } catch (py::error_already_set& e) {
    write(out, out_size, e.what());  // the exception and its traceback
    return 1;
  } catch (const std::exception& e) {
    write(out, out_size, e.what());
    return 1;
  }
}
