// The registry of all built-in backends, filled by explicit calls (no static registration).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/kernel.hpp"

namespace mosaic {

/// The process's registry: the built-in backends naive, im2col, onednn (in that order; a
/// build may leave im2col or onednn out), then what loaded plugins added
/// (backends/plugins.hpp).
const KernelRegistry& builtin_registry();
/// The backend commands run on when none is named (train, gradcheck, simulate, ...): onednn,
/// else im2col, else naive, whichever of them this build has.
std::string default_backend();
/// The same registry, writable: only load_plugin uses it, before any plan is built.
KernelRegistry& mutable_registry_for_plugins();
/// OpenBLAS's kernel family in use ("SkylakeX", "Haswell", ...); the environment variable
/// OPENBLAS_CORETYPE overrides OpenBLAS's own CPU detection. "none (...)" without im2col.
std::string blas_core_name();
/// oneDNN's effective instruction set ("avx512_core", ...).
std::string onednn_isa_name();

/// Versions of the libraries the built-in backends use: OpenBLAS, oneDNN, Eigen.
std::vector<std::pair<std::string, std::string>> backend_library_versions();

/// Sets the thread count of OpenMP, OpenBLAS and oneDNN (0 = leave the defaults).
void set_num_threads(int threads);

}  // namespace mosaic
