#include "operators/indexing.hpp"

#include <algorithm>

#include "ir/checked.hpp"
#include "operators/params.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

using Descs = std::vector<TensorDesc>;

Status numeric(const OpContext& c, size_t i) {
  const DType t = c.inputs[i].dtype;
  if (t == DType::kBool)
    return Status::invalid(c.node->label() + ": " + c.node->op_type + " takes a numeric tensor, got bool");
  return Status::ok();
}

Expected<Descs> infer_cumsum(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(numeric(c, 0));
  MOSAIC_RETURN_IF_ERROR(cumsum_params(c).status());
  return Descs{c.inputs[0]};
}

Expected<Descs> infer_tile(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(std::vector<int64_t> reps, tile_repeats(c));
  Shape out = c.inputs[0].shape;
  for (size_t d = 0; d < out.size(); ++d)
    if (!checked_mul(out[d], reps[d], &out[d]) || out[d] > kMaxDim)
      return Status::invalid(c.node->label() + ": axis " + std::to_string(d) + " of size " +
                             std::to_string(c.inputs[0].shape[d]) + " repeated " + std::to_string(reps[d]) +
                             " times is beyond 2^31 - 1");
  return Descs{{c.inputs[0].dtype, out}};
}

Expected<Descs> infer_gather_elements(const OpContext& c) {
  if (!is_index_dtype(c.inputs[1].dtype))
    return Status::invalid(c.node->label() + ": indices must be int64 or int32, got " + dtype_name(c.inputs[1].dtype));
  const Shape& x = c.inputs[0].shape;
  const Shape& idx = c.inputs[1].shape;
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, gather_elements_axis(c));
  if (idx.size() != x.size())
    return Status::invalid(c.node->label() + ": indices " + shape_str(idx) + " and data " + shape_str(x) +
                           " must have the same rank");
  for (size_t d = 0; d < x.size(); ++d)
    if (static_cast<int64_t>(d) != axis && idx[d] > x[d])
      return Status::invalid(c.node->label() + ": indices " + shape_str(idx) + " exceed data " + shape_str(x) +
                             " along axis " + std::to_string(d));
  if (shape_numel(idx) > 0 && x[static_cast<size_t>(axis)] == 0)
    return Status::invalid(c.node->label() + ": gathers along an empty axis");
  return Descs{{c.inputs[0].dtype, idx}};
}

Expected<Descs> infer_gather_nd(const OpContext& c) {
  if (!is_index_dtype(c.inputs[1].dtype))
    return Status::invalid(c.node->label() + ": indices must be int64 or int32, got " + dtype_name(c.inputs[1].dtype));
  MOSAIC_ASSIGN_OR_RETURN(GatherNDParams p, gather_nd_params(c));
  const Shape& idx = c.inputs[1].shape;
  Shape out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), p.data.begin() + p.batch_dims + p.depth, p.data.end());
  return Descs{{c.inputs[0].dtype, out}};
}

Status numeric_or_plain_scatter(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(ScatterReduction red, scatter_reduction(c));
  if (red != ScatterReduction::kNone) MOSAIC_RETURN_IF_ERROR(numeric(c, 0));
  if (!is_index_dtype(c.inputs[1].dtype))
    return Status::invalid(c.node->label() + ": indices must be int64 or int32, got " + dtype_name(c.inputs[1].dtype));
  if (c.inputs[2].dtype != c.inputs[0].dtype)
    return Status::invalid(c.node->label() + ": updates are " + dtype_name(c.inputs[2].dtype) + ", data " +
                           dtype_name(c.inputs[0].dtype));
  return Status::ok();
}

Expected<Descs> infer_scatter_elements(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(numeric_or_plain_scatter(c));
  const Shape &x = c.inputs[0].shape, &idx = c.inputs[1].shape;
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, gather_elements_axis(c));
  if (idx.size() != x.size() || c.inputs[2].shape != idx)
    return Status::invalid(c.node->label() + ": indices " + shape_str(idx) + " and updates " +
                           shape_str(c.inputs[2].shape) + " must have one shape, of data " + shape_str(x) + "'s rank");
  for (size_t d = 0; d < x.size(); ++d)
    if (static_cast<int64_t>(d) != axis && idx[d] > x[d])
      return Status::invalid(c.node->label() + ": indices " + shape_str(idx) + " exceed data " + shape_str(x) +
                             " along axis " + std::to_string(d));
  if (shape_numel(idx) > 0 && x[static_cast<size_t>(axis)] == 0)
    return Status::invalid(c.node->label() + ": scatters along an empty axis");
  return Descs{c.inputs[0]};
}

Expected<Descs> infer_scatter_nd(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(numeric_or_plain_scatter(c));
  const Shape &x = c.inputs[0].shape, &idx = c.inputs[1].shape;
  if (idx.empty() || x.empty()) return Status::invalid(c.node->label() + ": data and indices need rank >= 1");
  const int64_t k = idx.back();
  if (k < 1 || k > static_cast<int64_t>(x.size()))
    return Status::invalid(c.node->label() + ": index tuples of length " + std::to_string(k) + " for data " + shape_str(x));
  Shape want(idx.begin(), idx.end() - 1);
  want.insert(want.end(), x.begin() + k, x.end());
  if (c.inputs[2].shape != want)
    return Status::invalid(c.node->label() + ": updates " + shape_str(c.inputs[2].shape) + " should be " + shape_str(want));
  return Descs{c.inputs[0]};
}

Expected<Descs> infer_topk(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(numeric(c, 0));
  MOSAIC_ASSIGN_OR_RETURN(TopKParams p, topk_params(c));
  Shape out = c.inputs[0].shape;
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(c.node->attr_int("axis", -1), static_cast<int64_t>(out.size()),
                                                       *c.node));
  out[static_cast<size_t>(axis)] = p.k;
  return Descs{{c.inputs[0].dtype, out}, {DType::kI64, out}};
}

double f_cumsum(const OpContext& c) { return static_cast<double>(c.outputs[0].numel()); }
double f_zero(const OpContext&) { return 0.0; }

}  // namespace

Expected<CumSumParams> cumsum_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Tensor* axis_t = ctx.has_input(1) ? ctx.constant(1) : nullptr;
  if (!axis_t) return Status::unsupported(n.label() + ": axis must be a constant known at load time");
  if (axis_t->numel() != 1 || !is_index_dtype(axis_t->dtype()))
    return Status::invalid(n.label() + ": axis must be one int64 or int32 value");
  const Shape& x = ctx.inputs[0].shape;
  const int64_t r = static_cast<int64_t>(x.size());
  if (r == 0) return Status::invalid(n.label() + ": " + n.op_type + " of a scalar (rank >= 1 needed)");
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(axis_t->get_i64(0), r, n));
  CumSumParams p;
  for (int64_t d = 0; d < r; ++d) {
    if (d < axis) p.outer *= x[d];
    else if (d > axis) p.inner *= x[d];
  }
  p.axis_dim = x[axis];
  p.exclusive = n.attr_int("exclusive", 0) != 0;
  p.reverse = n.attr_int("reverse", 0) != 0;
  return p;
}

Expected<std::vector<int64_t>> tile_repeats(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Tensor* t = ctx.has_input(1) ? ctx.constant(1) : nullptr;
  if (!t) return Status::unsupported(n.label() + ": repeats must be a constant known at load time");
  if (t->dtype() != DType::kI64) return Status::invalid(n.label() + ": repeats must be int64");
  std::vector<int64_t> reps = t->to_i64_vector();
  if (reps.size() != ctx.inputs[0].shape.size())
    return Status::invalid(n.label() + ": " + std::to_string(reps.size()) + " repeats for an input of rank " +
                           std::to_string(ctx.inputs[0].shape.size()));
  for (int64_t v : reps)
    if (v < 0) return Status::invalid(n.label() + ": repeats must be >= 0, got " + std::to_string(v));
  return reps;
}

Expected<GatherNDParams> gather_nd_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  GatherNDParams p;
  p.data = ctx.inputs[0].shape;
  const Shape& idx = ctx.inputs[1].shape;
  const int64_t r = static_cast<int64_t>(p.data.size()), q = static_cast<int64_t>(idx.size());
  p.batch_dims = n.attr_int("batch_dims", 0);
  if (r < 1 || q < 1) return Status::invalid(n.label() + ": data and indices need rank >= 1");
  if (p.batch_dims < 0 || p.batch_dims >= std::min(r, q))
    return Status::invalid(n.label() + ": batch_dims " + std::to_string(p.batch_dims) + " must be below both ranks (" +
                           std::to_string(r) + ", " + std::to_string(q) + ")");
  for (int64_t d = 0; d < p.batch_dims; ++d) {
    if (p.data[d] != idx[d])
      return Status::invalid(n.label() + ": batch axis " + std::to_string(d) + " differs: data " + shape_str(p.data) +
                             ", indices " + shape_str(idx));
    p.batches *= p.data[d];
  }
  p.depth = idx.back();
  if (p.depth < 1 || p.depth > r - p.batch_dims)
    return Status::invalid(n.label() + ": index tuples of length " + std::to_string(p.depth) + " for data " +
                           shape_str(p.data) + " with " + std::to_string(p.batch_dims) + " batch axes");
  p.tuples = 1;
  for (int64_t d = p.batch_dims; d < q - 1; ++d) p.tuples *= idx[d];
  for (int64_t d = p.batch_dims + p.depth; d < r; ++d) p.slice *= p.data[d];
  return p;
}

Expected<ScatterReduction> scatter_reduction(const OpContext& ctx) {
  const std::string r = ctx.node->attr_string("reduction", "none");
  if (ctx.node->op_type == "Scatter" && ctx.node->has_attr("reduction"))
    return Status::invalid(ctx.node->label() + ": Scatter has no reduction (ScatterElements has, from opset 16)");
  if (r == "none") return ScatterReduction::kNone;
  if (r == "add") return ScatterReduction::kAdd;
  if (r == "mul") return ScatterReduction::kMul;
  if (r == "max" && ctx.opset >= 18) return ScatterReduction::kMax;
  if (r == "min" && ctx.opset >= 18) return ScatterReduction::kMin;
  return Status::invalid(ctx.node->label() + ": unknown reduction '" + r + "' at opset " + std::to_string(ctx.opset));
}

Expected<TopKParams> topk_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  const int64_t r = static_cast<int64_t>(x.size());
  if (r == 0) return Status::invalid(n.label() + ": TopK of a scalar");
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(n.attr_int("axis", -1), r, n));
  TopKParams p;
  for (int64_t d = 0; d < r; ++d) {
    if (d < axis) p.outer *= x[d];
    else if (d > axis) p.inner *= x[d];
  }
  p.axis_dim = x[axis];
  if (ctx.opset < 10) p.k = n.attr_int("k", -1);
  else {
    const Tensor* k = ctx.has_input(1) ? ctx.constant(1) : nullptr;
    if (!k) return Status::unsupported(n.label() + ": K must be a constant known at load time");
    if (k->numel() != 1 || k->dtype() != DType::kI64) return Status::invalid(n.label() + ": K must be one int64 value");
    p.k = k->i64()[0];
  }
  if (p.k < 0 || p.k > p.axis_dim)
    return Status::invalid(n.label() + ": K = " + std::to_string(p.k) + " is outside [0, " + std::to_string(p.axis_dim) +
                           "] (the axis' size)");
  p.largest = n.attr_int("largest", 1) != 0;
  return p;
}

Expected<int64_t> gather_elements_axis(const OpContext& ctx) {
  return normalize_axis(ctx.node->attr_int("axis", 0), static_cast<int64_t>(ctx.inputs[0].shape.size()), *ctx.node);
}

void add_indexing_schemas(std::map<std::string, OpSchema>& t) {
  auto add = [&](const char* op, int imin, int imax, auto infer, auto flops, std::string summary) {
    add_schema(t, op, imin, imax, infer, flops, std::move(summary));
  };
  add("CumSum", 2, 2, infer_cumsum, f_cumsum, "running sum along an axis (exclusive, reverse)");
  t["CumSum"].shape_inputs = {1};
  t["CumSum"].non_trainable_inputs = {1};
  t["CumSum"].backward_flops = [](const OpContext& c) -> std::vector<double> {
    return {static_cast<double>(c.outputs[0].numel()), 0};  // the transposed running sum
  };
  add("CumProd", 2, 2, infer_cumsum, f_cumsum, "running product along an axis (exclusive, reverse); no backward");
  t["CumProd"].shape_inputs = {1};
  t["CumProd"].non_trainable_inputs = {1};
  add("Tile", 2, 2, infer_tile, f_zero, "repeat the input along each axis");
  t["Tile"].shape_inputs = {1};
  t["Tile"].non_trainable_inputs = {1};
  t["Tile"].backward_flops = [](const OpContext& c) -> std::vector<double> {
    return {static_cast<double>(c.outputs[0].numel()), 0};  // one add per tiled element
  };
  add("ScatterElements", 3, 3, infer_scatter_elements, f_zero, "write updates along an axis (reduction)");
  add("ScatterND", 3, 3, infer_scatter_nd, f_zero, "write slices at index tuples (reduction)");
  // Scatter (versions 9 and 11, deprecated at opset 11) is ScatterElements without reduction.
  add("Scatter", 3, 3, infer_scatter_elements, f_zero, "ScatterElements' old name (opsets 9 and 10)");
  t["ScatterElements"].non_trainable_inputs = t["ScatterND"].non_trainable_inputs = t["Scatter"].non_trainable_inputs = {1};
  add("TopK", 1, 2, infer_topk, f_zero, "the k largest or smallest along an axis, sorted, with their indices");
  t["TopK"].max_outputs = 2;
  t["TopK"].min_outputs = 2;
  t["TopK"].shape_inputs = {1};
  t["TopK"].non_trainable_inputs = {1};
  add("GatherND", 2, 2, infer_gather_nd, f_zero, "slices picked by index tuples (batch_dims)");
  t["GatherND"].non_trainable_inputs = {1};
  t["GatherND"].backward_flops = [](const OpContext& c) -> std::vector<double> {
    return {static_cast<double>(c.outputs[0].numel()), 0};  // scatter-add
  };
  add("GatherElements", 2, 2, infer_gather_elements, f_zero, "take along an axis, one index per output element");
  t["GatherElements"].non_trainable_inputs = {1};
  t["GatherElements"].backward_flops = [](const OpContext& c) -> std::vector<double> {
    return {static_cast<double>(c.outputs[0].numel()), 0};  // scatter-add
  };
}

}  // namespace mosaic
