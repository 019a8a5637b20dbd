#include "operators/rearrange.hpp"

#include <cmath>

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
  if (dtype_packed_bits(to) || dtype_packed_bits(c.inputs[0].dtype))
    return Status::unsupported(c.node->label() + ": BitCast from " + dtype_name(c.inputs[0].dtype) + " to " +
                               dtype_name(to) + ": Mosaic does not reinterpret the packed 4- and 2-bit types");
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

Expected<Descs> infer_crop_pad(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(CropPadParams p, crop_pad_params(c));
  return Descs{{c.inputs[0].dtype, p.out}};
}

Expected<Descs> infer_window(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(WindowParams p, window_params(c));
  return Descs{{p.dtype, {p.size}}};
}

Expected<Descs> infer_tensor_scatter(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(tensor_scatter_params(c).status());
  return Descs{c.inputs[0]};
}

double f_zero(const OpContext&) { return 0; }
double f_window(const OpContext& c) { return 4.0 * static_cast<double>(c.outputs.empty() ? 0 : c.outputs[0].numel()); }

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

Expected<CropPadParams> crop_pad_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  const int64_t rank = static_cast<int64_t>(x.size());
  const Tensor* shape = ctx.constant(1);
  if (!shape) return Status::unsupported(n.label() + ": the target shape must be a constant known at load time");
  std::vector<int64_t> axes;
  if (n.has_attr("axes")) {
    for (int64_t a : n.attr_ints("axes")) {
      MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(a, rank, n));
      for (int64_t seen : axes)
        if (seen == axis) return Status::invalid(n.label() + ": axis " + std::to_string(a) + " is repeated");
      axes.push_back(axis);
    }
  } else {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  if (shape->numel() != static_cast<int64_t>(axes.size()))
    return Status::invalid(n.label() + ": shape has " + std::to_string(shape->numel()) + " values for " +
                           std::to_string(axes.size()) + " axes");
  CropPadParams p;
  p.out = x;
  p.src_begin.assign(x.size(), 0);
  p.dst_begin.assign(x.size(), 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    const size_t a = static_cast<size_t>(axes[k]);
    const int64_t s = shape->get_i64(static_cast<int64_t>(k));
    if (s < 0 || s > kMaxDim)
      return Status::invalid(n.label() + ": target size " + std::to_string(s) + " outside [0, 2^31 - 1]");
    if (s < x[a]) p.src_begin[a] = (x[a] - s) / 2;  // the centre kept; an odd extra one cut at the end
    else p.dst_begin[a] = (s - x[a]) / 2;
    p.out[a] = s;
  }
  if (shape_numel(p.out) > kMaxTensorBytes) return Status::invalid(n.label() + ": output " + shape_str(p.out) + " too large");
  return p;
}

Expected<WindowParams> window_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Tensor* size = ctx.constant(0);
  if (!size) return Status::unsupported(n.label() + ": the window length must be a constant known at load time");
  if (size->numel() != 1) return Status::invalid(n.label() + ": the window length must be one value");
  WindowParams p;
  p.size = size->get_i64(0);
  if (p.size < 0 || p.size > kMaxDim)
    return Status::invalid(n.label() + ": window length " + std::to_string(p.size) + " outside [0, 2^31 - 1]");
  p.periodic = n.attr_int("periodic", 1) != 0;
  const int64_t code = n.attr_int("output_datatype", 1);
  p.dtype = dtype_of_onnx(code);
  if (p.dtype == DType::kCount) return Status::unsupported(n.label() + ": output_datatype " + onnx_type_name(code));
  return p;
}

Expected<TensorScatterParams> tensor_scatter_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape &cache = ctx.inputs[0].shape, &update = ctx.inputs[1].shape;
  const int64_t r = static_cast<int64_t>(cache.size());
  if (r < 2) return Status::invalid(n.label() + ": past_cache must have a batch axis and a sequence axis, got " + shape_str(cache));
  if (ctx.inputs[1].dtype != ctx.inputs[0].dtype)
    return Status::invalid(n.label() + ": update is " + dtype_name(ctx.inputs[1].dtype) + ", past_cache " +
                           dtype_name(ctx.inputs[0].dtype));
  if (dtype_packed_bits(ctx.inputs[0].dtype))
    return Status::unsupported(n.label() + ": TensorScatter of " + dtype_name(ctx.inputs[0].dtype) +
                               " (Mosaic does not address the packed 4- and 2-bit types by element)");
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(n.attr_int("axis", -2), r, n));
  if (axis == 0) return Status::invalid(n.label() + ": axis 0 is the batch axis; the sequence axis must be another");
  bool fits = update.size() == cache.size() && update[static_cast<size_t>(axis)] <= cache[static_cast<size_t>(axis)];
  for (int64_t d = 0; fits && d < r; ++d)
    if (d != axis) fits = update[static_cast<size_t>(d)] == cache[static_cast<size_t>(d)];
  if (!fits)
    return Status::invalid(n.label() + ": update " + shape_str(update) + " must match past_cache " + shape_str(cache) +
                           " but for a sequence axis (" + std::to_string(axis) + ") no longer than the cache's");
  if (ctx.has_input(2) && (ctx.inputs[2].shape != Shape{cache[0]} || ctx.inputs[2].dtype != DType::kI64))
    return Status::invalid(n.label() + ": write_indices must be int64 [" + std::to_string(cache[0]) + "], got " +
                           dtype_name(ctx.inputs[2].dtype) + " " + shape_str(ctx.inputs[2].shape));
  const std::string mode = n.attr_string("mode", "linear");
  if (mode != "linear" && mode != "circular") return Status::invalid(n.label() + ": mode '" + mode + "' (linear, circular)");
  TensorScatterParams p;
  p.circular = mode == "circular";
  for (int64_t d = 0; d < r; ++d) {
    if (d < axis) p.outer *= cache[static_cast<size_t>(d)];
    else if (d > axis) p.inner *= cache[static_cast<size_t>(d)];
    if (d > 0 && d < axis) p.per_batch *= cache[static_cast<size_t>(d)];
  }
  p.max_len = cache[static_cast<size_t>(axis)];
  p.seq_len = update[static_cast<size_t>(axis)];
  return p;
}

int64_t tensor_scatter_position(const TensorScatterParams& p, int64_t index, int64_t step) {
  if (p.circular) {
    const int64_t m = p.max_len;  // > 0 whenever a step exists (seq_len <= max_len)
    return ((index % m) + step % m + m) % m;
  }
  if (index < 0 || index > p.max_len - p.seq_len) return -1;
  return index + step;
}

double window_value(const std::string& op, int64_t i, const WindowParams& p) {
  const double pi = 3.14159265358979323846, n = static_cast<double>(i);
  // N - 1 for a symmetric window, N for a periodic one (ONNX's definitions).
  const double N = static_cast<double>(p.periodic ? p.size : p.size - 1);
  if (op == "HannWindow") {
    const double s = std::sin(pi * n / N);
    return s * s;
  }
  if (op == "HammingWindow") {
    const double alpha = 25.0 / 46.0;
    return alpha - (1 - alpha) * std::cos(2 * pi * n / N);
  }
  return 0.42 - 0.5 * std::cos(2 * pi * n / N) + 0.08 * std::cos(4 * pi * n / N);  // BlackmanWindow
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
  add_schema(t, "CenterCropPad", 2, 2, infer_crop_pad, f_zero, "each axis cropped or zero-padded about its centre");
  t["CenterCropPad"].shape_inputs = {1};
  add_schema(t, "HannWindow", 1, 1, infer_window, f_window, "sin^2(pi n / N), periodic or symmetric");
  add_schema(t, "HammingWindow", 1, 1, infer_window, f_window, "25/46 - 21/46 cos(2 pi n / N)");
  add_schema(t, "BlackmanWindow", 1, 1, infer_window, f_window, "0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)");
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) t[op].shape_inputs = {0};
  add_schema(t, "TensorScatter", 2, 3, infer_tensor_scatter, f_zero,
             "a KV cache with each batch entry's update written from its write index (linear or circular)");
  t["TensorScatter"].non_trainable_inputs = {2};
  for (const char* op : {"DepthToSpace", "SpaceToDepth", "BitCast", "EyeLike", "OneHot", "ReverseSequence", "CenterCropPad",
                         "HannWindow", "HammingWindow", "BlackmanWindow", "TensorScatter"})
    t[op].backward_flops = nullptr;
}

}  // namespace mosaic
