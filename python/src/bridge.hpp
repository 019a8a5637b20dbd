// What every binding shares: JSON reports as plain Python objects, a call into the library
// with the GIL released and Ctrl-C turned into Mosaic's stop request, and Status errors (and
// exceptions a Python extension raised inside a kernel or an optimizer) as Python exceptions.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ir/status.hpp"

namespace mosaic::python {

namespace py = pybind11;

/// dict, list, str, int, float, bool, None.
py::object to_python(const nlohmann::json& j);

/// Runs `fn` with the GIL released. On the main thread, SIGINT and SIGTERM become Mosaic's stop
/// request for the call (ir/interrupt.hpp: timing loops and training steps stop at the next
/// safe point) and Python's handlers come back after it; a call that stopped so raises
/// KeyboardInterrupt once the GIL is held again.
void call_released(const std::function<void()>& fn);

/// Raises the Python exception for a failed call: the exception a Python extension raised
/// inside it (the first one, kept by keep_python_error), chained as the cause of a
/// mosaic.Error that carries `st`'s message; else mosaic.InvalidArgument (a ValueError) for
/// bad input and mosaic.Error for the rest.
[[noreturn]] void raise_status(const Status& st);

/// Called inside an extension's C++ shim with the GIL held, in the `catch` of a Python error:
/// keeps the first one of the current call (with its traceback) for raise_status, and returns
/// its one-line text for the Status the library reports.
std::string keep_python_error(py::error_already_set& e);

/// A float32 NumPy array holding a copy of `data` (it owns its memory), read-only unless
/// `writeable`. Python code handed one may keep it past the call, and past the life of the
/// memory it was copied from (a parameter freed when train() returns): a view there was a
/// use-after-free, a write after the call heap corruption.
py::array float_copy(const float* data, const std::vector<py::ssize_t>& shape, bool writeable);
/// Makes an array read-only: what a class kept of the arrays of a finished call raises
/// ValueError ("assignment destination is read-only") on a write, instead of changing nothing.
void seal(py::array& a);

/// The exception types, created by the module (mosaic.Error, mosaic.InvalidArgument).
void register_exceptions(py::module_& m);

}  // namespace mosaic::python
