// SupportChecks that several backends share (KernelTraits::supports): cheap tests of a node
// against its attributes and descriptors, asked before a kernel is built.
#pragma once

#include "core/kernel.hpp"

namespace mosaic {

/// Every present input and output is float32 (backends that compute in float only).
Status float32_only(const KernelContext& ctx);
/// Input 0 (the data) is float32; the others (axes, shapes) may be int64.
Status float32_data(const KernelContext& ctx);
/// MaxPool's optional second output (Indices) is absent: only naive computes it.
Status no_pool_indices(const KernelContext& ctx);
/// Both: the pooling kernels of the backends that compute float32 only.
Status float32_pool(const KernelContext& ctx);

}  // namespace mosaic
