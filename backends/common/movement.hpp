// Data-movement kernels shared by every backend: they only copy bytes in plain
// row-major layout (views, transpose, concat, slice, gather, pad, cast, constants), so
// one dtype-agnostic implementation serves all backends. Backends with a native kernel
// for one of these (e.g. oneDNN concat) register their own instead.
#pragma once

#include "core/kernel.hpp"

namespace mosaic {

/// Registers the view ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout).
void register_view_kernels(KernelRegistry& registry, const std::string& backend);
/// Registers one movement op by name ("Transpose", "Concat", "Slice", "Gather", "Pad",
/// "Cast", "Shape", "Constant", "ConstantOfShape").
void register_movement_kernel(KernelRegistry& registry, const std::string& backend, const std::string& op);

/// Row-major strides of a shape, in elements.
std::vector<int64_t> row_major_strides(const Shape& shape);

}  // namespace mosaic
