// GridSample (opsets 16, 20, 22): samples X [N, C, D1..Dk] at the normalised coordinates of
// grid [N, O1..Ok, k] (x first: the last spatial axis), nearest / linear / cubic (opset 16's
// bilinear / bicubic), padding zeros / border / reflection, align_corners; 2-D and 3-D
// spatial inputs (k = 2 or 3; opset 16 only 2-D).
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
void add_grid_sample_schema(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
