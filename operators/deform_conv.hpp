// DeformConv (opsets 19, 22): a 2-D convolution whose every kernel tap samples X at its
// regular position moved by a learned offset (bilinear between the four neighbouring pixels,
// zero outside the image), optionally weighted by a mask (modulated deformable convolution,
// DCNv2): X [N, C, H, W], W [M, C / group, kH, kW], offset [N, offset_group * kH * kW * 2,
// oH, oW] (per tap, the row then the column shift), B [M], mask [N, offset_group * kH * kW,
// oH, oW]. The channels of offset group g share its offsets.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/status.hpp"
#include "operators/op_context.hpp"

namespace mosaic {

struct OpSchema;

struct DeformConvParams {
  int64_t n = 1, c = 1, h = 1, w = 1, m = 1, group = 1, offset_group = 1;
  int64_t kh = 1, kw = 1, oh = 1, ow = 1;
  std::vector<int64_t> strides, dilations, pads;  ///< pads: top, left, bottom, right
  bool has_bias = false, has_mask = false;
};
Expected<DeformConvParams> deform_conv_params(const OpContext& ctx);

/// X's plane (h x w, row-major) at the fractional position (y, x): bilinear between the four
/// neighbours, each outside the plane counting 0.
double sample_bilinear_zero_padded(const float* plane, int64_t h, int64_t w, double y, double x);

void add_deform_conv_schema(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
