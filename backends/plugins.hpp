// Loading operator/backend plugins (backends/plugin.hpp) into the process's registry.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ir/status.hpp"

namespace mosaic {

class Registrar;

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

/// The one way registrations reach the registry, whatever they come from: `registration`
/// adds backends, kernels and operators through the Registrar, on a copy of the
/// registry that replaces it only if everything succeeded (all or nothing). load_plugin calls
/// it with a shared library's registration function; the Python package (python/) with a
/// Python class's. `origin` and `file` name it in loaded_plugins() ("python:module.Class").
Status register_extension(const std::string& origin, const std::string& file,
                          const std::function<Status(Registrar&)>& registration);

/// The plugins loaded so far, in load order.
const std::vector<LoadedPlugin>& loaded_plugins();

/// The --plugin arguments of a command line ("--plugin F" or "--plugin=F"), in order.
std::vector<std::string> plugin_arguments(int argc, const char* const* argv);

/// Plugins built with Mosaic (the torch backend): libmosaic_NAME.so files, each adding the
/// backend NAME, in the directory `plugins` next to the running executable (the build
/// tree) and in `../lib/mosaic/plugins` from it (after cmake --install); for a program that
/// embeds libmosaic.so, in `plugins` and `mosaic/plugins` beside the library. The first
/// directory that has any wins. Sorted by path.
std::vector<std::string> bundled_plugins();
/// The backend a bundled plugin file adds: "torch" for .../libmosaic_torch.so.
std::string bundled_backend_name(const std::string& path);
/// Loads a bundled plugin (load_plugin). One that does not load (a library it needs is
/// missing at run time, such as cuDNN where the CUDA toolkit was removed after the build; a
/// damaged file) does not fail the command: its backend is registered as unavailable, with
/// the loader's reason, so that `mosaic backends` lists it with the reason, `all` leaves it
/// out saying why, and a command naming it is refused with the reason before any work. The
/// loader's error only where even that cannot be done (another plugin took the name, or the
/// file's name is not a backend name).
Status load_bundled_plugin(const std::string& path);
/// Which bundled plugins a command line needs, so that a command that does not use them
/// does not pay for loading them (libtorch takes about a second): those whose backend the
/// command names (in any argument, such as --backend torch, --backends onednn,torch,
/// --assign Conv=torch or a YAML file given as an argument that mentions it), all of them
/// where it says `all` or `auto` (--assign auto) or lists backends (`mosaic backends`),
/// none otherwise.
std::vector<std::string> bundled_plugins_wanted(int argc, const char* const* argv);

}  // namespace mosaic
