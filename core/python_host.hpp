// Python files as plugins of a program that is not Python (the CLI, an embedding C++ program):
// `--plugin file.py` and `--optimizer-plugin file.py`. The Python package's host library
// (python/src/host.cpp, libmosaic_python_host.so, built with the package) starts an interpreter
// in this process, binds the package to this process's Mosaic, runs the file and registers the
// mosaic.Operator / mosaic.Optimizer classes it defines, through the same registries C++ plugins
// use. Inside Python (import mosaic) the package runs such files itself.
#pragma once

#include <string>
#include <vector>

#include "ir/status.hpp"

namespace mosaic {

/// Whether `path` names a Python file (ends in ".py").
bool is_python_plugin(const std::string& path);

/// Runs the Python file and registers what it defines: kind "operators" (its mosaic.Operator
/// subclasses; returns their op types) or "optimizers" (its mosaic.Optimizer subclasses;
/// returns their names). Errors name the file: it does not exist, the host library is missing
/// (a build without pybind11: the CLI says how to get it), the file raised (with the Python
/// error's text) or defines no such class.
Expected<std::vector<std::string>> run_python_plugin(const std::string& path, const std::string& kind);

}  // namespace mosaic
