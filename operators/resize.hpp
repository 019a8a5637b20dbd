// Resize (opsets 11 to 19): the output size, and each output position's source taps along
// each axis, as ONNX defines them: modes nearest (four rounding rules), linear and cubic;
// the coordinate transformations half_pixel, half_pixel_symmetric, pytorch_half_pixel,
// align_corners, asymmetric, tf_crop_and_resize (and tf_half_pixel_for_nn, opsets 11-12); exclude_outside, antialias,
// extrapolation_value; scales or sizes, axes and keep_aspect_ratio_policy (opset 18).
// Interpolation is separable: the kernels (backends/common/resize.cpp) apply the taps one
// axis at a time, in double.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/status.hpp"
#include "ir/tensor.hpp"
#include "operators/op_context.hpp"

namespace mosaic {

struct OpSchema;

struct ResizeParams {
  Shape in, out;
  std::vector<double> scale;  ///< per axis: the given scale, or out / in for sizes
  std::vector<double> roi;    ///< tf_crop_and_resize: starts then ends, per axis (else empty)
  std::string mode = "nearest", transform = "half_pixel", nearest_mode = "round_prefer_floor";
  double cubic_a = -0.75, extrapolation = 0.0;
  bool exclude_outside = false, antialias = false;
};
Expected<ResizeParams> resize_params(const OpContext& ctx);

/// One axis's taps: output position o reads `index[o * taps + k]` with `weight[...]`
/// (indices already clamped into the axis); `outside[o]`: tf_crop_and_resize's
/// extrapolated positions, which take extrapolation_value.
struct ResizeTaps {
  int64_t taps = 1;
  std::vector<int64_t> index;
  std::vector<double> weight;
  std::vector<bool> outside;
};
ResizeTaps resize_axis_taps(const ResizeParams& p, size_t axis);
/// Whether axis `a` is left as it is (scale 1, same size, whole roi).
bool resize_axis_identity(const ResizeParams& p, size_t axis);

void add_resize_schema(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
