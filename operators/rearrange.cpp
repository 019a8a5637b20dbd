#include "operators/rearrange.hpp"

#include "ir/checked.hpp"
#include "operators/onnx_versions.hpp"
#include "operators/params.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

using Descs = std::vector<TensorDesc>;

Expected<Descs> infer_block(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(BlockParams p, block_params(c));
  return Descs{{c.inputs[0].dtype, p.out}};
}

Expected<Descs> infer_bitcast(const OpContext& c) {
  const int64_t code = c.node->attr_int("to", 0);
  const DType to = dtype_of_onnx(code);
  if (to == DType::kCount)
    return Status::unsupported(c.node->label() + ": BitCast to element type " + onnx_type_name(code));
  if (dtype_size(to) != dtype_size(c.inputs[0].dtype))
    return Status::invalid(c.node->label() + ": BitCast from " + dtype_name(c.inputs[0].dtype) + " to " + dtype_name(to) +
                           ": the widths differ");
  return Descs{{to, c.inputs[0].shape}};
}

Expected<Descs> infer_eye_like(const OpContext& c) {
  const Shape& x = c.inputs[0].shape;
  if (x.size() != 2) return Status::invalid(c.node->label() + ": EyeLike takes a 2-D tensor, got " + shape_str(x));
  DType t = c.inputs[0].dtype;
  if (c.node->has_attr("dtype")) {
    const int64_t code = c.node->attr_int("dtype", 1);
    t = dtype_of_onnx(code);
    if (t == DType::kCount) return Status::unsupported(c.node->label() + ": element type " + onnx_type_name(code));
  }
  return Descs{{t, x}};
}

Expected<Descs> infer_one_hot(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(OneHotParams p, one_hot_params(c));
  if (c.inputs[2].numel() != 2) return Status::invalid(c.node->label() + ": values must hold [off, on]");
  return Descs{{c.inputs[2].dtype, p.out}};
}

Expected<Descs> infer_reverse_sequence(const OpContext& c) {
  const Shape& x = c.inputs[0].shape;
  const int64_t b = c.node->attr_int("batch_axis", 1), t = c.node->attr_int("time_axis", 0);
  if (x.size() < 2 || !((b == 0 && t == 1) || (b == 1 && t == 0)))
    return Status::invalid(c.node->label() + ": batch_axis and time_axis must be 0 and 1 of a tensor of rank >= 2");
  if (c.inputs[1].shape != Shape{x[static_cast<size_t>(b)]} || !is_index_dtype(c.inputs[1].dtype))
    return Status::invalid(c.node->label() + ": sequence_lens must be int64 [" + std::to_string(x[static_cast<size_t>(b)]) + "]");
  return Descs{c.inputs[0]};
}

double f_zero(const OpContext&) { return 0; }

}  // namespace

Expected<BlockParams> block_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  if (x.size() != 4) return Status::invalid(n.label() + ": input must be [N, C, H, W], got " + shape_str(x));
  BlockParams p;
  p.to_space = n.op_type == "DepthToSpace";
  p.n = x[0];
  p.c = x[1];
  p.h = x[2];
  p.w = x[3];
  p.block = n.attr_int("blocksize", 0);
  if (p.block <= 0 || p.block > kMaxDim) return Status::invalid(n.label() + ": blocksize must be positive");
  const std::string mode = n.attr_string("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") return Status::invalid(n.label() + ": mode must be DCR or CRD, got '" + mode + "'");
  p.crd = mode == "CRD";
  const int64_t bb = p.block * p.block;
  if (p.to_space) {
    if (p.c % bb) return Status::invalid(n.label() + ": " + std::to_string(p.c) + " channels do not divide into blocks of " + std::to_string(bb));
    p.out = {p.n, p.c / bb, p.h * p.block, p.w * p.block};
  } else {
    if (p.h % p.block || p.w % p.block)
      return Status::invalid(n.label() + ": " + shape_str(x) + " does not divide into blocks of " + std::to_string(p.block));
    p.out = {p.n, p.c * bb, p.h / p.block, p.w / p.block};
  }
  for (int64_t d : p.out)
    if (d > kMaxDim) return Status::invalid(n.label() + ": output " + shape_str(p.out) + " beyond 2^31 - 1");
  return p;
}

Expected<OneHotParams> one_hot_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Tensor* depth = ctx.has_input(1) ? ctx.constant(1) : nullptr;
  if (!depth) return Status::unsupported(n.label() + ": depth must be a constant known at load time");
  if (depth->numel() != 1) return Status::invalid(n.label() + ": depth must be one value");
  OneHotParams p;
  const double d = depth->get(0);
  if (!(d >= 1 && d <= static_cast<double>(kMaxDim))) return Status::invalid(n.label() + ": depth " + std::to_string(d) + " outside [1, 2^31 - 1]");
  p.depth = static_cast<int64_t>(d);
  const Shape& idx = ctx.inputs[0].shape;
  MOSAIC_ASSIGN_OR_RETURN(p.axis, normalize_axis(n.attr_int("axis", -1), static_cast<int64_t>(idx.size()) + 1, n));
  p.out = idx;
  p.out.insert(p.out.begin() + p.axis, p.depth);
  if (shape_numel(p.out) > kMaxTensorBytes) return Status::invalid(n.label() + ": output " + shape_str(p.out) + " too large");
  return p;
}

void add_rearrange_schemas(std::map<std::string, OpSchema>& t) {
  add_schema(t, "DepthToSpace", 1, 1, infer_block, f_zero, "channel blocks moved into space (DCR or CRD)");
  add_schema(t, "SpaceToDepth", 1, 1, infer_block, f_zero, "spatial blocks moved into channels (DCR or CRD)");
  add_schema(t, "BitCast", 1, 1, infer_bitcast, f_zero, "the same bits read as another type of the same width");
  add_schema(t, "EyeLike", 1, 1, infer_eye_like, f_zero, "ones on diagonal k, zeros elsewhere, x's shape");
  add_schema(t, "OneHot", 3, 3, infer_one_hot, f_zero, "on where the index matches along the new axis, off elsewhere");
  t["OneHot"].shape_inputs = {1};
  add_schema(t, "ReverseSequence", 2, 2, infer_reverse_sequence, f_zero,
             "each batch entry's first sequence_lens steps in reverse order");
  for (const char* op : {"DepthToSpace", "SpaceToDepth", "BitCast", "EyeLike", "OneHot", "ReverseSequence"})
    t[op].backward_flops = nullptr;
}

}  // namespace mosaic
