// Ops that rearrange or make up elements without arithmetic: DepthToSpace and SpaceToDepth
// (blocks of channels to and from space, DCR or CRD order), BitCast (the same bits as another
// type of the same width), EyeLike (an identity matrix, diagonal k), OneHot (indices to
// one-hot rows of on/off values along an axis), ReverseSequence (each batch entry's
// first sequence_lens steps reversed), CenterCropPad (each axis cropped or zero-padded
// about its centre), the signal windows HannWindow, HammingWindow and BlackmanWindow, and
// TensorScatter (opset 24: a KV cache's update written at each batch entry's position,
// linear or circular). Their kernels move bytes or write values: every element type.
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

/// TensorScatter: the cache [batch, ..., max_len (axis), ...] viewed as [outer, max_len,
/// inner], the update as [outer, seq_len, inner]; `per_batch` outer rows share a batch
/// entry's write index. Packed 4- and 2-bit types are declined.
struct TensorScatterParams {
  int64_t outer = 1, per_batch = 1, max_len = 1, seq_len = 0, inner = 1;
  bool circular = false;
};
Expected<TensorScatterParams> tensor_scatter_params(const OpContext& ctx);

/// Where update step `step` of a batch entry whose write index is `index` goes in the cache,
/// or -1 where it falls outside (linear mode): circular wraps modulo max_len.
int64_t tensor_scatter_position(const TensorScatterParams& p, int64_t index, int64_t step);

void add_rearrange_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
