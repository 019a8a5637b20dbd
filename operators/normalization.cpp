#include "operators/normalization.hpp"

#include "operators/params.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

Expected<std::vector<TensorDesc>> infer_instance_norm(const OpContext& c) {
  for (size_t i = 0; i < 3; ++i)
    if (!dtype_is_float(c.inputs[i].dtype))
      return Status::unsupported(c.node->label() + ": input " + std::to_string(i) + " has dtype " +
                                 dtype_name(c.inputs[i].dtype) + "; InstanceNormalization takes floating-point tensors");
  MOSAIC_RETURN_IF_ERROR(instance_norm_params(c).status());
  return std::vector<TensorDesc>{c.inputs[0]};
}

Expected<std::vector<TensorDesc>> infer_group_norm(const OpContext& c) {
  for (size_t i = 0; i < 3; ++i)
    if (!dtype_is_float(c.inputs[i].dtype) || c.inputs[i].dtype != c.inputs[0].dtype)
      return Status::unsupported(c.node->label() + ": input " + std::to_string(i) + " has dtype " +
                                 dtype_name(c.inputs[i].dtype) + "; GroupNormalization takes X, scale and bias of "
                                 "one floating-point type");
  MOSAIC_RETURN_IF_ERROR(group_norm_params(c).status());
  return std::vector<TensorDesc>{c.inputs[0]};
}

// Mean 1, variance 3, normalise 2, scale and shift 2 per element (as LayerNormalization).
double f_instance_norm(const OpContext& c) { return 8.0 * static_cast<double>(c.inputs[0].numel()); }

Expected<std::vector<TensorDesc>> infer_rms_norm(const OpContext& c) {
  for (size_t i = 0; i < 2; ++i)
    if (!dtype_is_float(c.inputs[i].dtype))
      return Status::unsupported(c.node->label() + ": input " + std::to_string(i) + " has dtype " +
                                 dtype_name(c.inputs[i].dtype) + "; RMSNormalization takes floating-point tensors");
  MOSAIC_RETURN_IF_ERROR(rms_norm_params(c).status());
  return std::vector<TensorDesc>{c.inputs[0]};
}

// Square and sum 2, normalise 2, scale 1 per element.
double f_rms_norm(const OpContext& c) { return 5.0 * static_cast<double>(c.inputs[0].numel()); }

}  // namespace

Expected<RmsNormParams> rms_norm_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  const int64_t r = static_cast<int64_t>(x.size());
  if (r == 0) return Status::invalid(n.label() + ": RMSNormalization of a scalar");
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(n.attr_int("axis", -1), r, n));
  RmsNormParams p;
  for (int64_t d = 0; d < r; ++d) (d < axis ? p.outer : p.inner) *= x[d];
  // The scale broadcasts onto the normalised shape: Mosaic takes it whole (leading 1s
  // allowed) or as one value.
  Shape scale = ctx.inputs[1].shape;
  while (!scale.empty() && scale.front() == 1 && static_cast<int64_t>(scale.size()) > r - axis) scale.erase(scale.begin());
  const Shape normalised(x.begin() + axis, x.end());
  p.scalar_scale = shape_numel(ctx.inputs[1].shape) == 1;
  if (!p.scalar_scale && scale != normalised)
    return Status::unsupported(n.label() + ": scale " + shape_str(ctx.inputs[1].shape) + " for the normalised shape " +
                               shape_str(normalised) + " (Mosaic takes the whole shape or one value)");
  p.epsilon = n.attr_float("epsilon", 1e-5f);
  return p;
}

Expected<GroupNormParams> instance_norm_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  if (x.size() < 2) return Status::invalid(n.label() + ": input must be N x C x ..., got " + shape_str(x));
  GroupNormParams p;
  p.batch = x[0];
  p.channels = p.groups = x[1];
  for (size_t d = 2; d < x.size(); ++d) p.spatial *= x[d];
  for (size_t i = 1; i < 3; ++i)
    if (ctx.inputs[i].shape != Shape{p.channels})
      return Status::invalid(n.label() + ": " + (i == 1 ? "scale" : "B") + " must have shape [" +
                             std::to_string(p.channels) + "], got " + shape_str(ctx.inputs[i].shape));
  p.epsilon = n.attr_float("epsilon", 1e-5f);
  return p;
}

Expected<GroupNormParams> group_norm_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  if (x.size() < 2) return Status::invalid(n.label() + ": X must be N x C x ..., got " + shape_str(x));
  if (!n.has_attr("num_groups")) return Status::invalid(n.label() + ": GroupNormalization needs num_groups");
  GroupNormParams p;
  p.batch = x[0];
  p.channels = x[1];
  for (size_t d = 2; d < x.size(); ++d) p.spatial *= x[d];
  p.groups = n.attr_int("num_groups", 0);
  if (p.groups < 1 || p.groups > p.channels || p.channels % p.groups != 0)
    return Status::invalid(n.label() + ": num_groups " + std::to_string(p.groups) + " must divide the " +
                           std::to_string(p.channels) + " channels");
  // Version 18 took a scale and bias per group; 21 per channel (opset 18 to 20 read as 18).
  p.affine_per_group = ctx.opset < 21;
  const int64_t affine = p.affine_per_group ? p.groups : p.channels;
  for (size_t i = 1; i < 3; ++i)
    if (ctx.inputs[i].shape != Shape{affine})
      return Status::invalid(n.label() + ": " + (i == 1 ? "scale" : "bias") + " must have shape [" +
                             std::to_string(affine) + "] (one value per " + (p.affine_per_group ? "group" : "channel") +
                             " at opset " + std::to_string(ctx.opset) + "), got " + shape_str(ctx.inputs[i].shape));
  // The statistics are computed in double, as precise as float32's stash and double's.
  const int64_t stash = n.attr_int("stash_type", 1);
  if (stash != 1 && stash != 11)
    return Status::unsupported(n.label() + ": stash_type " + std::to_string(stash) +
                               " (Mosaic computes the statistics in float32 or wider: 1 or 11)");
  p.epsilon = n.attr_float("epsilon", 1e-5f);
  return p;
}

Expected<LpNormParams> lp_norm_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  const int64_t r = static_cast<int64_t>(x.size());
  if (r == 0) return Status::invalid(n.label() + ": LpNormalization of a scalar");
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(n.attr_int("axis", -1), r, n));
  LpNormParams p;
  for (int64_t d = 0; d < r; ++d) (d < axis ? p.outer : d > axis ? p.inner : p.axis_dim) *= x[d];
  p.p = static_cast<int>(n.attr_int("p", 2));
  if (p.p != 1 && p.p != 2) return Status::invalid(n.label() + ": p must be 1 or 2, got " + std::to_string(p.p));
  return p;
}

Expected<MvnParams> mvn_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const int64_t r = static_cast<int64_t>(ctx.inputs[0].shape.size());
  MvnParams p;
  p.reduced.assign(static_cast<size_t>(r), false);
  for (int64_t a : n.attr_ints("axes", {0, 2, 3})) {
    MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(a, r, n));
    if (p.reduced[static_cast<size_t>(axis)]) return Status::invalid(n.label() + ": axis " + std::to_string(a) + " repeated");
    p.reduced[static_cast<size_t>(axis)] = true;
  }
  return p;
}

namespace {

Expected<std::vector<TensorDesc>> infer_lp_norm(const OpContext& c) {
  if (!dtype_is_float(c.inputs[0].dtype))
    return Status::unsupported(c.node->label() + ": LpNormalization takes floating-point tensors");
  MOSAIC_RETURN_IF_ERROR(lp_norm_params(c).status());
  return std::vector<TensorDesc>{c.inputs[0]};
}

Expected<std::vector<TensorDesc>> infer_mvn(const OpContext& c) {
  if (!dtype_is_float(c.inputs[0].dtype))
    return Status::unsupported(c.node->label() + ": MeanVarianceNormalization takes floating-point tensors");
  MOSAIC_RETURN_IF_ERROR(mvn_params(c).status());
  return std::vector<TensorDesc>{c.inputs[0]};
}

double f_three_per_element(const OpContext& c) { return 3.0 * static_cast<double>(c.inputs[0].numel()); }
double f_six_per_element(const OpContext& c) { return 6.0 * static_cast<double>(c.inputs[0].numel()); }

}  // namespace

void add_normalization_schemas(std::map<std::string, OpSchema>& table) {
  add_schema(table, "LpNormalization", 1, 1, infer_lp_norm, f_three_per_element,
             "x / (sum |x|^p)^(1/p) along axis, p 1 or 2 (0 where the norm is 0)");
  add_schema(table, "MeanVarianceNormalization", 1, 1, infer_mvn, f_six_per_element,
             "(x - mean) / (sqrt(mean(x^2) - mean^2) + 1e-9) over axes (default 0, 2, 3)");
  OpSchema& s = add_schema(table, "InstanceNormalization", 3, 3, infer_instance_norm, f_instance_norm,
                           "scale * (x - mean) / sqrt(var + epsilon) + B per channel of each image, over space");
  s.backward_flops = nullptr;
  OpSchema& g = add_schema(table, "GroupNormalization", 3, 3, infer_group_norm, f_instance_norm,
                           "scale * (x - mean) / sqrt(var + epsilon) + bias per group of channels of each image");
  g.backward_flops = nullptr;
  add_schema(table, "RMSNormalization", 2, 2, infer_rms_norm, f_rms_norm,
             "x / sqrt(mean(x^2) + epsilon) * scale over the axes from axis on");
}

}  // namespace mosaic
