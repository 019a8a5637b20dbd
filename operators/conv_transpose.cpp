#include "operators/conv_transpose.hpp"

#include "ir/checked.hpp"
#include "operators/params.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

Expected<std::vector<TensorDesc>> infer_conv_transpose(const OpContext& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.has_input(i) && !dtype_is_float(c.inputs[i].dtype))
      return Status::unsupported(c.node->label() + ": ConvTranspose takes floating-point tensors");
  MOSAIC_ASSIGN_OR_RETURN(ConvTransposeParams p, conv_transpose_params(c));
  Shape out{p.n, p.m};
  out.insert(out.end(), p.out.begin(), p.out.end());
  return std::vector<TensorDesc>{{c.inputs[0].dtype, out}};
}

// One multiply-add per input element per kernel tap per output channel of its group.
double f_conv_transpose(const OpContext& c) {
  auto p = conv_transpose_params(c);
  if (!p.ok()) return 0;
  return 2.0 * static_cast<double>(c.inputs[0].numel()) * static_cast<double>(shape_numel(p->kernel)) *
         static_cast<double>(p->m / p->group);
}

Expected<std::vector<TensorDesc>> infer_col2im(const OpContext& c) {
  if (!dtype_is_float(c.inputs[0].dtype))
    return Status::unsupported(c.node->label() + ": Col2Im of " + dtype_name(c.inputs[0].dtype) + " (floating-point types)");
  MOSAIC_ASSIGN_OR_RETURN(Col2ImParams p, col2im_params(c));
  Shape out{p.n, p.c};
  out.insert(out.end(), p.image.begin(), p.image.end());
  return std::vector<TensorDesc>{{c.inputs[0].dtype, out}};
}

// Col2Im: one add per input element; MaxUnpool: one write.
double f_one_per_input(const OpContext& c) { return static_cast<double>(c.inputs[0].numel()); }


Expected<std::vector<TensorDesc>> infer_max_unpool(const OpContext& c) {
  if (!dtype_is_float(c.inputs[0].dtype) || c.inputs[1].dtype != DType::kI64)
    return Status::unsupported(c.node->label() + ": MaxUnpool takes floating-point X and int64 indices");
  MOSAIC_ASSIGN_OR_RETURN(MaxUnpoolParams p, max_unpool_params(c));
  return std::vector<TensorDesc>{{c.inputs[0].dtype, p.out}};
}

}  // namespace

Expected<MaxUnpoolParams> max_unpool_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  if (x.size() < 3) return Status::invalid(n.label() + ": X must be [N, C, D...], got " + shape_str(x));
  if (ctx.inputs[1].shape != x)
    return Status::invalid(n.label() + ": I " + shape_str(ctx.inputs[1].shape) + " must have X's shape " + shape_str(x));
  const size_t k = x.size() - 2;
  if (!n.has_attr("kernel_shape")) return Status::invalid(n.label() + ": MaxUnpool needs kernel_shape");
  MOSAIC_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, bounded_ints(n, "kernel_shape", 1, 1, k));
  MOSAIC_ASSIGN_OR_RETURN(std::vector<int64_t> strides, bounded_ints(n, "strides", 1, 1, k));
  MOSAIC_ASSIGN_OR_RETURN(std::vector<int64_t> pads, bounded_ints(n, "pads", 0, 0, 2 * k));
  MaxUnpoolParams p;
  p.inferred = {x[0], x[1]};
  for (size_t d = 0; d < k; ++d) {
    // (in - 1) * stride - pads + kernel: MaxPool's input extent before its floor.
    const __int128 v = static_cast<__int128>(x[d + 2] - 1) * strides[d] - pads[d] - pads[d + k] + kernel[d];
    if (v < 0 || v > kMaxDim)
      return Status::invalid(n.label() + ": the unpooled extent along axis " + std::to_string(d + 2) + " is " +
                             (v < 0 ? "negative" : "beyond 2^31 - 1"));
    p.inferred.push_back(static_cast<int64_t>(v));
  }
  p.out = p.inferred;
  if (ctx.has_input(2)) {
    const Tensor* shape = ctx.constant(2);
    if (!shape) return Status::unsupported(n.label() + ": output_shape must be a constant known at load time");
    const std::vector<int64_t> given = shape->to_i64_vector();
    bool fits = given.size() == x.size() && given[0] == x[0] && given[1] == x[1];
    for (size_t d = 2; fits && d < given.size(); ++d) fits = given[d] >= p.inferred[d] && given[d] <= kMaxDim;
    if (!fits)
      return Status::invalid(n.label() + ": output_shape " + shape_str(Shape(given)) + " must keep N and C and hold the " +
                             "unpooled " + shape_str(p.inferred));
    p.out = Shape(given);
  }
  if (shape_numel(p.out) > kMaxTensorBytes) return Status::invalid(n.label() + ": output too large");
  return p;
}

Expected<Col2ImParams> col2im_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  const Tensor *image = ctx.constant(1), *block = ctx.constant(2);
  if (!image || !block) return Status::unsupported(n.label() + ": image_shape and block_shape must be constants known at load time");
  if (x.size() != 3) return Status::invalid(n.label() + ": input must be [N, C * prod(block_shape), L], got " + shape_str(x));
  const size_t k = static_cast<size_t>(image->numel());
  if (k == 0 || block->numel() != image->numel() || !is_index_dtype(image->dtype()) || !is_index_dtype(block->dtype()))
    return Status::invalid(n.label() + ": image_shape and block_shape must be int64 lists of one length, at least 1");
  Col2ImParams p;
  p.n = x[0];
  for (size_t d = 0; d < k; ++d) {
    const int64_t i = image->get_i64(static_cast<int64_t>(d)), b = block->get_i64(static_cast<int64_t>(d));
    if (i < 1 || i > kMaxDim || b < 1 || b > kMaxDim)
      return Status::invalid(n.label() + ": image_shape " + std::to_string(i) + " and block_shape " + std::to_string(b) +
                             " must be in [1, 2^31 - 1]");
    p.image.push_back(i);
    p.block.push_back(b);
  }
  MOSAIC_ASSIGN_OR_RETURN(p.strides, bounded_ints(n, "strides", 1, 1, k));
  MOSAIC_ASSIGN_OR_RETURN(p.dilations, bounded_ints(n, "dilations", 1, 1, k));
  MOSAIC_ASSIGN_OR_RETURN(std::vector<int64_t> pads, bounded_ints(n, "pads", 0, 0, 2 * k));
  p.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(k));
  int64_t taps = 1, positions = 1;
  for (size_t d = 0; d < k; ++d) {
    // Block positions along d: (image + pads - dilated block) / stride + 1, at least one.
    const __int128 span = static_cast<__int128>(p.dilations[d]) * (p.block[d] - 1) + 1;
    const __int128 room = static_cast<__int128>(p.image[d]) + pads[d] + pads[d + k] - span;
    if (room < 0)
      return Status::invalid(n.label() + ": the dilated block (" + std::to_string(static_cast<int64_t>(span)) +
                             ") is larger than the padded image along axis " + std::to_string(d));
    p.blocks.push_back(static_cast<int64_t>(room / p.strides[d] + 1));
    if (!checked_mul(taps, p.block[d], &taps) || !checked_mul(positions, p.blocks[d], &positions))
      return Status::invalid(n.label() + ": block_shape or the grid of blocks too large");
  }
  if (x[1] % taps != 0 || x[2] != positions)
    return Status::invalid(n.label() + ": input " + shape_str(x) + " must be [N, C * " + std::to_string(taps) + ", " +
                           std::to_string(positions) + "] for blocks " + shape_str(p.block) + " over image " +
                           shape_str(p.image) + " (" + shape_str(p.blocks) + " block positions)");
  p.c = x[1] / taps;
  Shape out{p.n, p.c};
  out.insert(out.end(), p.image.begin(), p.image.end());
  if (shape_numel(out) > kMaxTensorBytes) return Status::invalid(n.label() + ": output " + shape_str(out) + " too large");
  return p;
}

Expected<ConvTransposeParams> conv_transpose_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape &x = ctx.inputs[0].shape, &w = ctx.inputs[1].shape;
  if (x.size() < 3 || w.size() != x.size())
    return Status::invalid(n.label() + ": X " + shape_str(x) + " and W " + shape_str(w) + " must be [N, C, D...] and [C, M/group, K...]");
  const size_t k = x.size() - 2;
  ConvTransposeParams p;
  p.n = x[0];
  p.c = x[1];
  p.group = n.attr_int("group", 1);
  if (p.group <= 0 || p.c % p.group || w[0] != p.c)
    return Status::invalid(n.label() + ": W " + shape_str(w) + " must have X's " + std::to_string(p.c) +
                           " channels first, divisible into group " + std::to_string(p.group));
  if (!checked_mul(w[1], p.group, &p.m) || p.m > kMaxDim) return Status::invalid(n.label() + ": too many output channels");
  p.in.assign(x.begin() + 2, x.end());
  p.kernel.assign(w.begin() + 2, w.end());
  auto list = [&](const char* name, int64_t def, size_t count) { return bounded_ints(n, name, def, def, count); };
  MOSAIC_ASSIGN_OR_RETURN(p.strides, list("strides", 1, k));
  MOSAIC_ASSIGN_OR_RETURN(p.dilations, list("dilations", 1, k));
  MOSAIC_ASSIGN_OR_RETURN(std::vector<int64_t> out_pad, list("output_padding", 0, k));
  if (n.has_attr("kernel_shape") && n.attr_ints("kernel_shape") != std::vector<int64_t>(p.kernel.begin(), p.kernel.end()))
    return Status::invalid(n.label() + ": kernel_shape differs from W's " + shape_str(p.kernel));
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  if (!same && auto_pad != "NOTSET" && auto_pad != "VALID")
    return Status::invalid(n.label() + ": auto_pad '" + auto_pad + "'");
  // The extent before padding: stride * (in - 1) + output_padding + (kernel - 1) * dilation + 1.
  std::vector<int64_t> full(k);
  for (size_t d = 0; d < k; ++d) {
    const __int128 v = static_cast<__int128>(p.strides[d]) * (p.in[d] - 1) + out_pad[d] +
                       static_cast<__int128>(p.kernel[d] - 1) * p.dilations[d] + 1;
    if (v > kMaxDim) return Status::invalid(n.label() + ": output extent beyond 2^31 - 1 along axis " + std::to_string(d));
    full[d] = static_cast<int64_t>(v);
  }
  std::vector<int64_t> pads;
  const bool has_shape = n.has_attr("output_shape");
  std::vector<int64_t> shape;
  if (has_shape) {
    shape = n.attr_ints("output_shape");
    if (shape.size() == k + 2) shape.erase(shape.begin(), shape.begin() + 2);  // the whole shape given
    if (shape.size() != k) return Status::invalid(n.label() + ": output_shape has " + std::to_string(shape.size()) + " values");
    for (int64_t e : shape)
      if (e < 0 || e > kMaxDim) return Status::invalid(n.label() + ": output_shape value " + std::to_string(e) + " out of range");
  }
  if (n.has_attr("pads")) {
    MOSAIC_ASSIGN_OR_RETURN(pads, list("pads", 0, 2 * k));
  } else if (same) {  // from the total padding: the odd one at the end (SAME_UPPER) or the start
    pads.assign(2 * k, 0);
    for (size_t d = 0; d < k; ++d) {
      const int64_t target = has_shape ? shape[d] : p.in[d] * p.strides[d];
      const int64_t total = full[d] - target;
      pads[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[d + k] = total - pads[d];
    }
  } else {
    pads.assign(2 * k, 0);
  }
  p.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(k));
  for (size_t d = 0; d < k; ++d) {
    const int64_t o = has_shape ? shape[d] : full[d] - pads[d] - pads[d + k];
    if (o < 0) return Status::invalid(n.label() + ": the padding leaves a negative extent along axis " + std::to_string(d));
    p.out.push_back(o);
  }
  p.has_bias = ctx.has_input(2);
  if (p.has_bias && ctx.inputs[2].shape != Shape{p.m})
    return Status::invalid(n.label() + ": B must have shape [" + std::to_string(p.m) + "], got " + shape_str(ctx.inputs[2].shape));
  if (shape_numel(p.out) * p.n * p.m > kMaxTensorBytes) return Status::invalid(n.label() + ": output too large");
  return p;
}

void add_conv_transpose_schema(std::map<std::string, OpSchema>& table) {
  OpSchema& s = add_schema(table, "ConvTranspose", 2, 3, infer_conv_transpose, f_conv_transpose,
                           "transposed convolution: each input element spread over the kernel's window (strides, groups)");
  s.backward_flops = nullptr;
  OpSchema& c = add_schema(table, "Col2Im", 3, 3, infer_col2im, f_one_per_input,
                           "columns of blocks summed back into an image (im2col's inverse; strides, dilations, pads)");
  c.shape_inputs = {1, 2};
  c.non_trainable_inputs = {1, 2};
  c.backward_flops = nullptr;
  OpSchema& u = add_schema(table, "MaxUnpool", 2, 3, infer_max_unpool, f_one_per_input,
                           "MaxPool's inverse: X's values written at their indices, zeros elsewhere");
  u.shape_inputs = {2};
  u.non_trainable_inputs = {1, 2};
  u.backward_flops = nullptr;
}

}  // namespace mosaic
