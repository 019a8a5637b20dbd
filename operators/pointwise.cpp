// Schemas of the rows of kPointwiseOps (operators/pointwise.hpp).
#include "operators/pointwise.hpp"

#include "operators/params.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

Expected<std::vector<TensorDesc>> infer_pointwise(const OpContext& c) {
  const PointwiseOpInfo& info = pointwise_info(*pointwise_op_of(c.node->op_type));
  const DType t = c.inputs[0].dtype;
  const bool ok = (dtype_is_float(t) && info.floats) || (dtype_is_integer(t) && info.integers);
  if (!ok)
    return Status::unsupported(c.node->label() + ": " + info.name + " of " + dtype_name(t) + " (Mosaic computes it on " +
                               (info.floats && info.integers ? "floats and integers" : info.floats ? "floats" : "integers") +
                               ")");
  Shape out = c.inputs[0].shape;
  if (info.arity == 2) {
    if (c.inputs[1].dtype != t)
      return Status::invalid(c.node->label() + ": operand dtypes differ (" + dtype_name(t) + " vs " +
                             dtype_name(c.inputs[1].dtype) + ")");
    auto s = broadcast_shapes(c.inputs[0].shape, c.inputs[1].shape);
    if (!s.ok()) return s.status().with_context(c.node->label());
    out = *s;
  }
  return std::vector<TensorDesc>{{info.to_bool ? DType::kBool : t, out}};
}

double pointwise_flops(const OpContext& c) { return static_cast<double>(c.outputs[0].numel()); }

}  // namespace

void add_pointwise_schemas(std::map<std::string, OpSchema>& table) {
  for (const PointwiseOpInfo& p : kPointwiseOps)
    add_schema(table, p.name, p.arity, p.arity, infer_pointwise, pointwise_flops, p.summary);
}

}  // namespace mosaic
