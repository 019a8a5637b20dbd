#include "operators/loss_ops.hpp"

#include "operators/schema.hpp"

namespace mosaic {
namespace {

Expected<std::vector<TensorDesc>> infer_loss_op(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(LossOpParams p, loss_op_params(c));
  const DType t = c.inputs[0].dtype;
  std::vector<TensorDesc> out{{t, p.reduction == LossReduction::kNone ? c.inputs[1].shape : Shape{}}};
  if (p.softmax && c.node->has_output(1)) out.push_back({t, c.inputs[0].shape});
  return out;
}

// A few FLOPs per score (the softmax) and per target.
double f_loss_op(const OpContext& c) { return 5.0 * static_cast<double>(c.inputs[0].numel()); }

}  // namespace

Expected<LossOpParams> loss_op_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape &x = ctx.inputs[0].shape, &t = ctx.inputs[1].shape;
  if (!dtype_is_float(ctx.inputs[0].dtype))
    return Status::invalid(n.label() + ": scores must be a float tensor, got " + dtype_name(ctx.inputs[0].dtype));
  if (!is_index_dtype(ctx.inputs[1].dtype))
    return Status::invalid(n.label() + ": targets must be int64 or int32, got " + dtype_name(ctx.inputs[1].dtype));
  if (x.size() < 2 || t.size() + 1 != x.size() || t[0] != x[0])
    return Status::invalid(n.label() + ": scores " + shape_str(x) + " and targets " + shape_str(t) +
                           " must be [N, C, d...] and [N, d...]");
  for (size_t d = 1; d < t.size(); ++d)
    if (t[d] != x[d + 1])
      return Status::invalid(n.label() + ": scores " + shape_str(x) + " and targets " + shape_str(t) + " disagree");
  LossOpParams p;
  p.softmax = n.op_type == "SoftmaxCrossEntropyLoss";
  p.n = x[0];
  p.classes = x[1];
  for (size_t d = 2; d < x.size(); ++d) p.inner *= x[d];
  p.has_weight = ctx.has_input(2);
  if (p.has_weight && ctx.inputs[2].shape != Shape{p.classes})
    return Status::invalid(n.label() + ": weight must have shape [" + std::to_string(p.classes) + "], got " +
                           shape_str(ctx.inputs[2].shape));
  p.has_ignore = n.has_attr("ignore_index");
  p.ignore_index = n.attr_int("ignore_index", 0);
  const std::string r = n.attr_string("reduction", "mean");
  if (r == "none") p.reduction = LossReduction::kNone;
  else if (r == "sum") p.reduction = LossReduction::kSum;
  else if (r == "mean") p.reduction = LossReduction::kMean;
  else return Status::invalid(n.label() + ": reduction must be none, sum or mean, got '" + r + "'");
  return p;
}

void add_loss_op_schemas(std::map<std::string, OpSchema>& table) {
  add_schema(table, "NegativeLogLikelihoodLoss", 2, 3, infer_loss_op, f_loss_op,
             "-weight[t] * x[n, t, d...] per target t (ignore_index skipped), reduced none/sum/mean");
  OpSchema& s = add_schema(table, "SoftmaxCrossEntropyLoss", 2, 3, infer_loss_op, f_loss_op,
                           "NegativeLogLikelihoodLoss of log_softmax over axis 1; log_prob as a second output");
  s.max_outputs = 2;
}

}  // namespace mosaic
