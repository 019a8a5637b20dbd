#include "operators/normalization.hpp"

#include "operators/schema.hpp"

namespace mosaic {
namespace {

Expected<std::vector<TensorDesc>> infer_instance_norm(const OpContext& c) {
  for (size_t i = 0; i < 3; ++i)
    if (c.inputs[i].dtype != DType::kF32)
      return Status::unsupported(c.node->label() + ": input " + std::to_string(i) + " has dtype " +
                                 dtype_name(c.inputs[i].dtype) + "; Mosaic computes InstanceNormalization in float32");
  MOSAIC_RETURN_IF_ERROR(instance_norm_params(c).status());
  return std::vector<TensorDesc>{c.inputs[0]};
}

// Mean 1, variance 3, normalise 2, scale and shift 2 per element (as LayerNormalization).
double f_instance_norm(const OpContext& c) { return 8.0 * static_cast<double>(c.inputs[0].numel()); }

}  // namespace

Expected<InstanceNormParams> instance_norm_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  if (x.size() < 2) return Status::invalid(n.label() + ": input must be N x C x ..., got " + shape_str(x));
  InstanceNormParams p;
  p.batch = x[0];
  p.channels = x[1];
  for (size_t d = 2; d < x.size(); ++d) p.spatial *= x[d];
  for (size_t i = 1; i < 3; ++i)
    if (ctx.inputs[i].shape != Shape{p.channels})
      return Status::invalid(n.label() + ": " + (i == 1 ? "scale" : "B") + " must have shape [" +
                             std::to_string(p.channels) + "], got " + shape_str(ctx.inputs[i].shape));
  p.epsilon = n.attr_float("epsilon", 1e-5f);
  return p;
}

void add_normalization_schemas(std::map<std::string, OpSchema>& table) {
  OpSchema& s = add_schema(table, "InstanceNormalization", 3, 3, infer_instance_norm, f_instance_norm,
                           "scale * (x - mean) / sqrt(var + epsilon) + B per channel of each image, over space");
  s.backward_flops = nullptr;
}

}  // namespace mosaic
