#include "bridge.hpp"

#include <pthread.h>

#include <csignal>

#include "ir/interrupt.hpp"

namespace mosaic::python {

namespace {

PyObject* g_error = nullptr;    // mosaic.Error
PyObject* g_invalid = nullptr;  // mosaic.InvalidArgument
// The first Python exception an extension raised during the current call (GIL held to touch).
// A pointer, not a static object: nothing of Python's may be destroyed after the interpreter
// is (clear_pending runs at exit).
py::error_already_set* g_pending = nullptr;

void clear_pending() {
  delete g_pending;
  g_pending = nullptr;
}

}  // namespace

py::object to_python(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return py::none();
    case nlohmann::json::value_t::boolean: return py::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return py::int_(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return py::int_(j.get<uint64_t>());
    case nlohmann::json::value_t::number_float: return py::float_(j.get<double>());
    case nlohmann::json::value_t::string: return py::str(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      py::list l;
      for (const auto& v : j) l.append(to_python(v));
      return std::move(l);
    }
    case nlohmann::json::value_t::object: {
      py::dict d;
      for (const auto& [k, v] : j.items()) d[py::str(k)] = to_python(v);
      return std::move(d);
    }
    default: return py::none();  // binary, discarded: never in Mosaic's reports
  }
}

py::array float_copy(const float* data, const std::vector<py::ssize_t>& shape, bool writeable) {
  // No base object: pybind11 allocates the array's own memory and copies `data` into it.
  py::array a(py::dtype::of<float>(), shape, {}, data);
  if (!writeable) seal(a);
  return a;
}

void seal(py::array& a) { py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_; }

void call_released(const std::function<void()>& fn) {
  clear_pending();
  const bool main_thread =
      py::module_::import("threading").attr("current_thread")().is(py::module_::import("threading").attr("main_thread")());
  struct sigaction old_int {}, old_term {};
  sigset_t old_mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &old_mask);
  if (main_thread) {
    sigaction(SIGINT, nullptr, &old_int);
    sigaction(SIGTERM, nullptr, &old_term);
    request_interrupt(0);
    install_interrupt_handlers();  // blocks both in this thread: the receiver thread takes them
  } else {  // the threads this call starts inherit the mask: signals never land in their kernels
    const sigset_t s = interrupt_signals();
    pthread_sigmask(SIG_BLOCK, &s, nullptr);
  }
  auto restore = [&] {
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    if (!main_thread) return;
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  };
  try {
    py::gil_scoped_release release;
    fn();
  } catch (...) {  // Python's handlers come back whatever happened
    restore();
    throw;
  }
  restore();
  if (main_thread) {
    const int sig = interrupt_signal();
    request_interrupt(0);
    if (sig == SIGINT) {
      PyErr_SetNone(PyExc_KeyboardInterrupt);
      throw py::error_already_set();
    }
    if (sig == SIGTERM) {
      // Python's own SIGTERM action (by default: end the process), now that the call stopped.
      std::raise(SIGTERM);
    }
  }
}

std::string keep_python_error(py::error_already_set& e) {
  std::string text = e.what();
  const auto newline = text.find('\n');
  if (newline != std::string::npos) text.resize(newline);
  if (!g_pending) g_pending = new py::error_already_set(std::move(e));
  return text;
}

void raise_status(const Status& st) {
  PyObject* type = st.code() == StatusCode::kInvalidArgument ? g_invalid : g_error;
  if (g_pending) {
    py::error_already_set cause = std::move(*g_pending);
    clear_pending();
    py::raise_from(cause, type, st.message().c_str());
    throw py::error_already_set();
  }
  PyErr_SetString(type, st.message().c_str());
  throw py::error_already_set();
}

void register_exceptions(py::module_& m) {
  g_error = PyErr_NewExceptionWithDoc("mosaic.Error",
                                      "A Mosaic call failed: the message names the file, node or option.",
                                      PyExc_RuntimeError, nullptr);
  py::tuple bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_invalid = PyErr_NewExceptionWithDoc("mosaic.InvalidArgument", "Bad input: a model, option value or file.",
                                        bases.ptr(), nullptr);
  m.add_object("Error", py::handle(g_error));
  m.add_object("InvalidArgument", py::handle(g_invalid));
  py::module_::import("atexit").attr("register")(py::cpp_function([] { clear_pending(); }));
}

}  // namespace mosaic::python
