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
/// Every registered backend's properties (BackendInfo::properties: libraries, the kernels
/// it picks here, what forced them), in registration order; those without any are left out.
std::vector<std::pair<std::string, BackendProperties>> backend_properties();

/// Sets the thread count of OpenMP, OpenBLAS and oneDNN (0 = leave the defaults).
/// OpenBLAS maps a buffer of address space for each thread it adds, and when that mmap fails
/// (an address-space limit, `ulimit -v`) it retries forever: a hang, not an error. So the
/// space those buffers need is reserved first; where it cannot be, nothing changes and the
/// error names the count, the space it needs and the limit.
[[nodiscard]] Status set_num_threads(int threads);

}  // namespace mosaic
