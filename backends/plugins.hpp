// Loading operator/backend plugins (backends/plugin.hpp) into the process's registry.
#pragma once

#include <string>
#include <vector>

#include "core/status.hpp"

namespace mosaic {

/// What one loaded plugin added.
struct LoadedPlugin {
  std::string path;                    ///< as given on the command line
  std::string file;                    ///< its canonical path
  std::vector<std::string> backends;   ///< backends it added
  std::vector<std::string> kernels;    ///< "backend:OpType" for every kernel it added
  std::vector<std::string> operators;  ///< "domain.OpType" for every custom operator
};

/// Loads a plugin and adds everything it registers to builtin_registry() and the schema
/// table, all or nothing. Errors name the file: it cannot be opened, it is not a Mosaic
/// plugin, it was built against another interface version or other headers, or its
/// registration failed (a duplicate backend, kernel or operator; a kernel for an unknown
/// backend or op). Loading a file already loaded does nothing. Call before any plan is
/// built (the CLI loads --plugin files before it parses the rest of the command line).
Status load_plugin(const std::string& path);

/// The plugins loaded so far, in load order.
const std::vector<LoadedPlugin>& loaded_plugins();

/// The --plugin arguments of a command line ("--plugin F" or "--plugin=F"), in order.
std::vector<std::string> plugin_arguments(int argc, const char* const* argv);

}  // namespace mosaic
