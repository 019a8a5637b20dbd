// Ops that rearrange or make up elements without arithmetic: DepthToSpace and SpaceToDepth
// (blocks of channels to and from space, DCR or CRD order), BitCast (the same bits as another
// type of the same width), EyeLike (an identity matrix, diagonal k), OneHot (indices to
// one-hot rows of on/off values along an axis), ReverseSequence (each batch entry's
// first sequence_lens steps reversed), CenterCropPad (each axis cropped or zero-padded
// about its centre) and the signal windows HannWindow, HammingWindow and BlackmanWindow.
// Their kernels move bytes or write values: every element type.
#pragma once

#include <map>
#include <string>

#include "operators/op_context.hpp"
#include "ir/status.hpp"

namespace mosaic {

struct OpSchema;

/// DepthToSpace / SpaceToDepth on [N, C, H, W]: the output element for each input element.
struct BlockParams {
  int64_t n = 1, c = 1, h = 1, w = 1, block = 1;
  bool to_space = true;  ///< DepthToSpace
  bool crd = false;      ///< column-row-depth order (else depth-column-row)
  Shape out;
};
Expected<BlockParams> block_params(const OpContext& ctx);

/// OneHot: depth (a constant), the new axis, the output shape.
struct OneHotParams {
  int64_t depth = 1, axis = 0;
  Shape out;
};
Expected<OneHotParams> one_hot_params(const OpContext& ctx);

/// CenterCropPad: per axis, the output size and where the kept run starts in the input
/// (cropping) and in the output (padding).
struct CropPadParams {
  Shape out;
  std::vector<int64_t> src_begin, dst_begin;
};
Expected<CropPadParams> crop_pad_params(const OpContext& ctx);

/// The window functions: length (a constant), periodic, the element type to write.
struct WindowParams {
  int64_t size = 0;
  bool periodic = true;
  DType dtype = DType::kF32;
};
Expected<WindowParams> window_params(const OpContext& ctx);
/// Element n of the window named by op_type, in double.
double window_value(const std::string& op_type, int64_t n, const WindowParams& p);

void add_rearrange_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
