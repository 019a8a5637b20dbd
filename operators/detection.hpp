// Detection ops: NonZero, NonMaxSuppression and RoiAlign. NonZero's and NonMaxSuppression's
// output length depends on their input values: their shapes are inferred only where those
// inputs are constants (folding, or a plan specialised on given inputs, core/run_time_shape.hpp),
// so the selection itself is defined here once, for shape inference and for the kernels.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/status.hpp"
#include "ir/tensor.hpp"
#include "operators/op_context.hpp"

namespace mosaic {

struct OpSchema;

/// How many elements of `x` are not zero (NaN is not zero, -0.0 is).
int64_t count_nonzero(const Tensor& x);

/// NonMaxSuppression's attributes and scalar inputs.
struct NmsParams {
  int64_t batches = 0, classes = 0, boxes = 0;
  bool center_point_box = false;  ///< boxes are [x_center, y_center, width, height], else two corners [y1, x1, y2, x2]
  int64_t max_per_class = 0;      ///< max_output_boxes_per_class (omitted: 0, no output)
  float iou_threshold = 0;
  bool has_score_threshold = false;
  float score_threshold = 0;
};
/// The shapes and attributes of a NonMaxSuppression node (its scalar inputs not read).
Expected<NmsParams> nms_shape_params(const OpContext& ctx);
/// `p` with the scalar inputs' values (max_output_boxes_per_class, iou_threshold,
/// score_threshold; nullptr where omitted) read in.
Expected<NmsParams> nms_with_scalars(NmsParams p, const Node& node, const Tensor* max_per_class, const Tensor* iou,
                                     const Tensor* score);
/// The selected [batch, class, box] triples, in ONNX's order: per batch and class, by
/// descending score (ties: the lower box index first), each box kept when its IoU with every
/// box kept before it in its class is at most the threshold. `boxes` [B, N, 4] and `scores`
/// [B, C, N] are float32.
std::vector<int64_t> nms_select(const NmsParams& p, const float* boxes, const float* scores);

/// RoiAlign's attributes (versions 10, 16 and 22: version 10 maps rois with no half-pixel
/// offset and makes them at least 1x1; 16 added coordinate_transformation_mode, default
/// half_pixel).
struct RoiAlignParams {
  int64_t n = 1, c = 1, h = 1, w = 1, rois = 0, out_h = 1, out_w = 1, sampling_ratio = 0;
  float spatial_scale = 1;
  bool max_mode = false;
  bool half_pixel = true;
};
Expected<RoiAlignParams> roi_align_params(const OpContext& ctx);

void add_detection_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
