// GridSample (opsets 16, 20, 22): samples X [N, C, D1..Dk] at the normalised coordinates of
// grid [N, O1..Ok, k] (x first: the last spatial axis), nearest / linear / cubic (opset 16's
// bilinear / bicubic), padding zeros / border / reflection, align_corners; 2-D and 3-D
// spatial inputs (k = 2 or 3; opset 16 only 2-D).
// AffineGrid (opset 20): the grid GridSample reads for an affine transform, theta [N, 2, 3]
// or [N, 3, 4] applied to the normalised coordinates of every point of size [N, C, H, W] or
// [N, C, D, H, W] (align_corners as GridSample's): [N, H, W, 2] or [N, D, H, W, 3], x first.
#pragma once

#include <map>
#include <string>

#include "operators/op_context.hpp"
#include "ir/status.hpp"

namespace mosaic {

struct OpSchema;

enum class GridMode { kNearest, kLinear, kCubic };
enum class GridPadding { kZeros, kBorder, kReflection };

struct GridSampleParams {
  int64_t n = 1, c = 1;
  Shape in, out;  ///< the spatial extents of X and of the output
  GridMode mode = GridMode::kLinear;
  GridPadding padding = GridPadding::kZeros;
  bool align_corners = false;
};

Expected<GridSampleParams> grid_sample_params(const OpContext& ctx);
struct AffineGridParams {
  int64_t n = 1;
  Shape spatial;  ///< H, W or D, H, W
  bool align_corners = false;
};
Expected<AffineGridParams> affine_grid_params(const OpContext& ctx);

/// The normalised coordinate of position i of an axis of `size` points in [-1, 1]: the
/// corners' centres at -1 and 1 with align_corners, else the points' centres; 0 for one point.
double affine_grid_coordinate(int64_t i, int64_t size, bool align_corners);

void add_grid_sample_schema(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
