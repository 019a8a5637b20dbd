// The naive backend: plain loops, no tricks, never optimised. It is the reference
// oracle every other backend is tested against, and it runs constant folding.
#pragma once

#include "core/kernel.hpp"

namespace mosaic {

/// Registers every naive kernel under the backend name "naive".
Status register_naive_kernels(KernelRegistry& registry);

}  // namespace mosaic
