// Data-movement kernels shared by every backend: they only copy bytes in plain
// row-major layout (views, transpose, concat, slice, gather, pad, cast, constants), so
// one dtype-agnostic implementation serves all backends. Backends with a native kernel
// for one of these (e.g. oneDNN concat) register their own instead.
#pragma once

#include "core/registration.hpp"
#include "operators/params.hpp"

namespace mosaic {

/// Registers the view ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout).
void add_view_kernels(BackendRegistration& r);
/// The kernel of a view op: output 0 is input 0's memory under the output's shape (no
/// forward runs), and the executor passes gradients through. Plugins register it too.
KernelFactory view_kernel_factory();
/// Registers one movement op by name ("Transpose", "Concat", "Split", "Slice", "Gather",
/// "Pad", "Cast", "Shape", "Constant", "ConstantOfShape").
void add_movement_kernel(BackendRegistration& r, const std::string& op);
/// The shared kernel of one of those ops (a backend that runs it on some nodes only).
KernelFactory movement_kernel_factory(const std::string& op);

/// Per output axis, the input index each output index reads (-1: the fill value). Slice and
/// Pad are both such per-axis maps; the kernels here and gradcheck's double-precision
/// reference share them.
using AxisMaps = std::vector<std::vector<int64_t>>;
Expected<AxisMaps> slice_axis_maps(const KernelContext& ctx);
/// Pad's maps for `p` (constant: -1 outside; edge: clamped; reflect: mirrored; wrap: modulo).
AxisMaps pad_axis_maps(const PadParams& p, const Shape& in, const Shape& out);

/// Row-major strides of a shape, in elements.
std::vector<int64_t> row_major_strides(const Shape& shape);

/// The error of a Gather index outside its axis (every backend's Gather says the same):
/// `label` names the node and its indices input, `value` is the index as given, `position`
/// its element in the indices.
Status gather_index_error(const std::string& label, int64_t value, int64_t position, int64_t axis_dim);

}  // namespace mosaic
