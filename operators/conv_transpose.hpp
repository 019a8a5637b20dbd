// ConvTranspose: the gradient of a convolution with respect to its input, used as an
// upsampling layer (segmentation decoders, GANs, U-Nets). X [N, C, D1..Dk], W [C, M/group,
// K1..Kk], B [M]; strides, dilations, group, pads or auto_pad, output_padding and
// output_shape resolved as ONNX's reference does.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "operators/op_context.hpp"
#include "ir/status.hpp"

namespace mosaic {

struct OpSchema;

struct ConvTransposeParams {
  int64_t n = 1, c = 1, m = 1, group = 1;
  Shape in, kernel, out;  ///< spatial extents
  std::vector<int64_t> strides, dilations, pad_begin;
  bool has_bias = false;
};

Expected<ConvTransposeParams> conv_transpose_params(const OpContext& ctx);
void add_conv_transpose_schema(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
