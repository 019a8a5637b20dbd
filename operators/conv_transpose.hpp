// ConvTranspose: the gradient of a convolution with respect to its input, used as an
// upsampling layer (segmentation decoders, GANs, U-Nets). X [N, C, D1..Dk], W [C, M/group,
// K1..Kk], B [M]; strides, dilations, group, pads or auto_pad, output_padding and
// output_shape resolved as ONNX's reference does.
// Col2Im (opset 18): the inverse of im2col, each column of blocks summed back into an image:
// input [N, C * prod(block_shape), L] with L the number of block positions, image_shape and
// block_shape constant inputs; strides, dilations and pads as a convolution's.
// MaxUnpool (opsets 9, 11, 22): MaxPool's inverse, each value of X written where its index
// (MaxPool's Indices, flat over the whole unpooled tensor) points, zeros elsewhere; the
// unpooled shape from kernel_shape, strides and pads, or output_shape (the inferred one
// embedded at its start, as ONNX's reference).
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
struct Col2ImParams {
  int64_t n = 1, c = 1;
  Shape image, block, blocks;  ///< spatial extents: the image, a block, the grid of block positions
  std::vector<int64_t> strides, dilations, pad_begin;
};
Expected<Col2ImParams> col2im_params(const OpContext& ctx);

struct MaxUnpoolParams {
  Shape inferred;  ///< the whole unpooled shape, [N, C, ...], that the indices address
  Shape out;       ///< the output's: output_shape where given, else `inferred`
};
Expected<MaxUnpoolParams> max_unpool_params(const OpContext& ctx);

void add_conv_transpose_schema(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
