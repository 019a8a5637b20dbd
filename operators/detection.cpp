#include "operators/detection.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "ir/checked.hpp"
#include "operators/schema.hpp"

namespace mosaic {

int64_t count_nonzero(const Tensor& x) {
  int64_t n = 0;
  for (int64_t i = 0; i < x.numel(); ++i) n += x.get(i) != 0 ? 1 : 0;
  return n;
}

namespace {

Expected<std::vector<TensorDesc>> infer_nonzero(const OpContext& c) {
  const Tensor* x = c.constant(0);
  if (!x)
    return Status::unsupported(c.node->label() +
                               ": its output's length (how many elements are not zero) depends on X's values");
  const int64_t rank = std::max<int64_t>(1, static_cast<int64_t>(c.inputs[0].shape.size()));  // a scalar reads as [1]
  return std::vector<TensorDesc>{{DType::kI64, {rank, count_nonzero(*x)}}};
}

/// One index per output element per input axis.
double f_nonzero(const OpContext& c) { return static_cast<double>(c.inputs[0].numel()); }

Expected<std::vector<TensorDesc>> infer_nms(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(NmsParams p, nms_shape_params(c));
  const Tensor* boxes = c.constant(0);
  const Tensor* scores = c.constant(1);
  const Tensor* scalars[3] = {nullptr, nullptr, nullptr};
  bool known = boxes && scores;
  for (size_t i = 2; i < 5; ++i)
    if (c.has_input(i)) {
      scalars[i - 2] = c.constant(i);
      known = known && scalars[i - 2];
    }
  if (!known)
    return Status::unsupported(c.node->label() + ": its output's length (how many boxes it keeps) depends on the "
                                                 "values of its inputs");
  MOSAIC_ASSIGN_OR_RETURN(p, nms_with_scalars(p, *c.node, scalars[0], scalars[1], scalars[2]));
  if (boxes->dtype() != DType::kF32 || scores->dtype() != DType::kF32)
    return Status::unsupported(c.node->label() + ": boxes and scores must be float32");
  const auto selected = nms_select(p, boxes->f32(), scores->f32());
  return std::vector<TensorDesc>{{DType::kI64, {static_cast<int64_t>(selected.size() / 3), 3}}};
}

// Per pair of boxes compared, about 20 operations; at most boxes^2 / 2 pairs per class.
double f_nms(const OpContext& c) {
  auto p = nms_shape_params(c);
  if (!p.ok()) return 0;
  return 10.0 * static_cast<double>(p->batches * p->classes) * static_cast<double>(p->boxes) *
         static_cast<double>(p->boxes);
}

Expected<std::vector<TensorDesc>> infer_roi_align(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(RoiAlignParams p, roi_align_params(c));
  const Shape out{p.rois, p.c, p.out_h, p.out_w};
  MOSAIC_RETURN_IF_ERROR(check_shape(out, c.inputs[0].dtype, c.node->label() + ": output"));
  return std::vector<TensorDesc>{{c.inputs[0].dtype, out}};
}

// Per output element: the bilinear taps (4 multiply-adds) of each sample in its bin; the
// adaptive grid depends on the rois' values, so one sample per bin is counted where unknown.
double f_roi_align(const OpContext& c) {
  auto p = roi_align_params(c);
  if (!p.ok()) return 0;
  const double samples = p->sampling_ratio > 0 ? static_cast<double>(p->sampling_ratio * p->sampling_ratio) : 1.0;
  return static_cast<double>(p->rois * p->c * p->out_h * p->out_w) * samples * 8;
}

}  // namespace

Expected<NmsParams> nms_shape_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape &b = ctx.inputs[0].shape, &s = ctx.inputs[1].shape;
  if (b.size() != 3 || b[2] != 4 || s.size() != 3 || s[0] != b[0] || s[2] != b[1])
    return Status::invalid(n.label() + ": boxes " + shape_str(b) + " and scores " + shape_str(s) +
                           " must be [batches, boxes, 4] and [batches, classes, boxes]");
  for (size_t i = 2; i < 5; ++i)
    if (ctx.has_input(i) && ctx.inputs[i].numel() > 1)
      return Status::invalid(n.label() + ": input " + std::to_string(i) + " must be a scalar, got " +
                             shape_str(ctx.inputs[i].shape));
  if (ctx.has_input(2) && ctx.inputs[2].dtype != DType::kI64)
    return Status::invalid(n.label() + ": max_output_boxes_per_class must be int64");
  const int64_t cpb = n.attr_int("center_point_box", 0);
  if (cpb != 0 && cpb != 1) return Status::invalid(n.label() + ": center_point_box must be 0 or 1, got " + std::to_string(cpb));
  NmsParams p;
  p.batches = b[0];
  p.boxes = b[1];
  p.classes = s[1];
  p.center_point_box = cpb == 1;
  return p;
}

Expected<NmsParams> nms_with_scalars(NmsParams p, const Node& node, const Tensor* max_per_class, const Tensor* iou,
                                     const Tensor* score) {
  if (max_per_class && max_per_class->numel() == 1) p.max_per_class = std::max<int64_t>(0, max_per_class->get_i64(0));
  if (iou && iou->numel() == 1) p.iou_threshold = static_cast<float>(iou->get(0));
  if (score && score->numel() == 1) {
    p.has_score_threshold = true;
    p.score_threshold = static_cast<float>(score->get(0));
  }
  if (std::isnan(p.iou_threshold) || std::isnan(p.score_threshold))
    return Status::invalid(node.label() + ": iou_threshold and score_threshold must be numbers, not NaN");
  return p;
}

namespace {

struct Extent {
  float x0, x1, y0, y1, area;
};

Extent extent(const float* b, bool center) {
  Extent e;
  if (center) {
    const float hw = b[2] / 2, hh = b[3] / 2;
    e = {b[0] - hw, b[0] + hw, b[1] - hh, b[1] + hh, 0};
  } else {
    e = {std::min(b[1], b[3]), std::max(b[1], b[3]), std::min(b[0], b[2]), std::max(b[0], b[2]), 0};
  }
  e.area = (e.x1 - e.x0) * (e.y1 - e.y0);
  return e;
}

/// Whether the boxes overlap by more than `threshold` of their union (ONNX: strictly more).
bool suppresses(const Extent& a, const Extent& b, float threshold) {
  const float ix0 = std::max(a.x0, b.x0), ix1 = std::min(a.x1, b.x1);
  if (ix1 <= ix0) return false;
  const float iy0 = std::max(a.y0, b.y0), iy1 = std::min(a.y1, b.y1);
  if (iy1 <= iy0) return false;
  const float inter = (ix1 - ix0) * (iy1 - iy0);
  const float uni = a.area + b.area - inter;
  if (inter <= 0 || a.area <= 0 || b.area <= 0 || uni <= 0) return false;
  return inter / uni > threshold;
}

std::vector<int64_t> select(const NmsParams& p, const float* boxes, const float* scores) {
  std::vector<int64_t> out;
  if (p.max_per_class == 0) return out;
  std::vector<int64_t> order;
  std::vector<Extent> extents(static_cast<size_t>(p.boxes)), kept;
  for (int64_t b = 0; b < p.batches; ++b) {
    const float* bb = boxes + b * p.boxes * 4;
    for (int64_t i = 0; i < p.boxes; ++i) extents[static_cast<size_t>(i)] = extent(bb + i * 4, p.center_point_box);
    for (int64_t cl = 0; cl < p.classes; ++cl) {
      const float* sc = scores + (b * p.classes + cl) * p.boxes;
      order.clear();
      for (int64_t i = 0; i < p.boxes; ++i)
        if (!p.has_score_threshold || sc[i] > p.score_threshold) order.push_back(i);
      // By descending score, ties (and NaN scores, which rank last) keeping the lower index first.
      std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
        return !std::isnan(sc[i]) && (std::isnan(sc[j]) || sc[i] > sc[j]);
      });
      kept.clear();
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= p.max_per_class) break;
        const Extent& e = extents[static_cast<size_t>(i)];
        bool keep = true;
        for (const Extent& k : kept)
          if (suppresses(k, e, p.iou_threshold)) {
            keep = false;
            break;
          }
        if (!keep) continue;
        kept.push_back(e);
        out.insert(out.end(), {b, cl, i});
      }
    }
  }
  return out;
}

}  // namespace

std::vector<int64_t> nms_select(const NmsParams& p, const float* boxes, const float* scores) {
  // A node evaluated at run time selects the same boxes twice (its shape, then its values):
  // the last selection is kept with a copy of what it was made from, and reused only where
  // every parameter and input is the same.
  struct Last {
    NmsParams p;
    std::vector<float> boxes, scores;
    std::vector<int64_t> selected;
  };
  thread_local Last last;
  const size_t nb = static_cast<size_t>(p.batches * p.boxes * 4), ns = static_cast<size_t>(p.batches * p.classes * p.boxes);
  const bool same = last.p.batches == p.batches && last.p.classes == p.classes && last.p.boxes == p.boxes &&
                    last.p.center_point_box == p.center_point_box && last.p.max_per_class == p.max_per_class &&
                    last.p.iou_threshold == p.iou_threshold && last.p.has_score_threshold == p.has_score_threshold &&
                    last.p.score_threshold == p.score_threshold && last.boxes.size() == nb && last.scores.size() == ns &&
                    (nb == 0 || std::memcmp(last.boxes.data(), boxes, nb * sizeof(float)) == 0) &&
                    (ns == 0 || std::memcmp(last.scores.data(), scores, ns * sizeof(float)) == 0);
  if (same) return last.selected;
  last.selected = select(p, boxes, scores);
  last.p = p;
  last.boxes.assign(boxes, boxes + nb);
  last.scores.assign(scores, scores + ns);
  return last.selected;
}

Expected<RoiAlignParams> roi_align_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape &x = ctx.inputs[0].shape, &r = ctx.inputs[1].shape, &bi = ctx.inputs[2].shape;
  if (x.size() != 4 || r.size() != 2 || r[1] != 4 || bi.size() != 1 || bi[0] != r[0])
    return Status::invalid(n.label() + ": X " + shape_str(x) + ", rois " + shape_str(r) + " and batch_indices " +
                           shape_str(bi) + " must be [N, C, H, W], [R, 4] and [R]");
  if (!dtype_is_float(ctx.inputs[0].dtype) || ctx.inputs[1].dtype != ctx.inputs[0].dtype ||
      !is_index_dtype(ctx.inputs[2].dtype))
    return Status::invalid(n.label() + ": X and rois must be one floating-point type and batch_indices int64");
  RoiAlignParams p;
  p.n = x[0];
  p.c = x[1];
  p.h = x[2];
  p.w = x[3];
  p.rois = r[0];
  p.out_h = n.attr_int("output_height", 1);
  p.out_w = n.attr_int("output_width", 1);
  p.sampling_ratio = n.attr_int("sampling_ratio", 0);
  p.spatial_scale = n.attr_float("spatial_scale", 1.f);
  if (p.out_h < 1 || p.out_w < 1 || p.out_h > kMaxDim || p.out_w > kMaxDim)
    return Status::invalid(n.label() + ": output_height and output_width must be in [1, 2^31 - 1]");
  if (p.sampling_ratio < 0 || p.sampling_ratio > 1024)
    return Status::invalid(n.label() + ": sampling_ratio " + std::to_string(p.sampling_ratio) +
                           " (0, adaptive, or at most 1024 samples a side)");
  if (!std::isfinite(p.spatial_scale)) return Status::invalid(n.label() + ": spatial_scale must be finite");
  const std::string mode = n.attr_string("mode", "avg");
  if (mode != "avg" && mode != "max") return Status::invalid(n.label() + ": mode '" + mode + "' (avg, max)");
  p.max_mode = mode == "max";
  const std::string ctm = n.attr_string("coordinate_transformation_mode", ctx.opset >= 16 ? "half_pixel" : "output_half_pixel");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    return Status::invalid(n.label() + ": coordinate_transformation_mode '" + ctm + "' (half_pixel, output_half_pixel)");
  p.half_pixel = ctm == "half_pixel";
  return p;
}

void add_detection_schemas(std::map<std::string, OpSchema>& t) {
  add_schema(t, "NonZero", 1, 1, infer_nonzero, f_nonzero,
             "the indices of the elements that are not zero, [rank, count] (a length known at run time)");
  OpSchema& nms = add_schema(t, "NonMaxSuppression", 2, 5, infer_nms, f_nms,
                             "greedy non-maximum suppression per batch and class: [count, 3] selected indices");
  nms.non_trainable_inputs = {0, 1, 2, 3, 4};
  nms.shape_inputs = {2};
  OpSchema& ra = add_schema(t, "RoiAlign", 3, 3, infer_roi_align, f_roi_align,
                            "bilinear pooling of regions of interest to a fixed grid (avg/max)");
  ra.non_trainable_inputs = {1, 2};
}

}  // namespace mosaic
