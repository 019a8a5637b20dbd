// The registry of all built-in backends, filled by explicit calls (no static registration).
#pragma once

#include "core/kernel.hpp"

namespace mosaic {

/// naive, im2col, onednn — in that order.
const KernelRegistry& builtin_registry();
/// Sets the thread count of OpenMP, OpenBLAS and oneDNN (0 = leave the defaults).
void set_num_threads(int threads);

}  // namespace mosaic
