// The cuda backend's com.microsoft QOperator element-wise ops planned on the host (issue 52):
// from a node's context, the parameters device_qlinear.hpp's functions read (and, for
// QLinearSigmoid and QLinearLeakyRelu, the oracle's table of 256 codes). Header-only and free
// of CUDA, so that tests/test_cuda_qlinear_math.cpp plans the same nodes and runs the
// functions on the host against the naive oracle.
//
// Every scale and zero point must be a constant (ONNX Runtime's quantiser writes them as
// initialisers): the ratios and tables are fixed when the plan is built, as the oracle forms
// them each run. Declined with the reason (the planner falls back to the host): a scale or
// zero point computed at run time or given per axis, codes other than uint8/int8, operands of
// two types, a broadcast over more than 6 dimensions, another fused activation than Relu.
#pragma once

#include <string>
#include <vector>

#include "backends/cuda/device_qlinear.hpp"
#include "backends/cuda/device_unary.hpp"  // make_broadcast
#include "backends/cuda/int8_plan.hpp"     // is_code_type
#include "operators/ms_quantize.hpp"

namespace mosaic::cuda_backend {

namespace qlinear_detail {

/// A scale and zero point fixed at plan time: input `scale` a float32 constant of one value
/// (checked as the oracle checks it), input `zero_point` absent (0) or a constant of one value.
struct ConstantQuant {
  float scale = 1.f;
  int zero_point = 0;
};
inline Expected<ConstantQuant> constant_quant(const KernelContext& ctx, size_t scale, size_t zero_point,
                                              const std::string& what) {
  const std::string& label = ctx.node->label();
  // The constant of one value at input i (QLinearConcat's Y scale sits at input 0).
  auto scalar = [&](size_t i) -> const Tensor* {
    const Tensor* t = ctx.has_input(i) ? ctx.constant(i) : nullptr;
    return t && t->numel() == 1 ? t : nullptr;
  };
  const Tensor* s = scalar(scale);
  if (!s || s->dtype() != DType::kF32)
    return Status::unsupported(label + ": " + what + "'s scale must be a float32 constant of one value on cuda");
  ConstantQuant q;
  q.scale = s->f32()[0];
  MOSAIC_RETURN_IF_ERROR(check_quant_scale(*ctx.node, q.scale, what + "'s scale"));
  if (zero_point < ctx.inputs.size() && ctx.has_input(zero_point)) {
    const Tensor* z = scalar(zero_point);
    if (!z) return Status::unsupported(label + ": " + what + "'s zero point must be a constant of one value on cuda");
    q.zero_point = static_cast<int>(z->get_i64(0));
  }
  return q;
}

/// The codes' type: uint8 or int8, the same for every input slot in `slots` and the output;
/// sets `is_signed` and the output's range.
inline Status one_code_type(const KernelContext& ctx, std::initializer_list<size_t> slots, bool* is_signed, int* lo,
                            int* hi) {
  const DType t = ctx.outputs[0].dtype;
  for (size_t i : slots)
    if (!is_code_type(t) || ctx.inputs[i].dtype != t)
      return Status::unsupported(ctx.node->label() + ": uint8 or int8 codes of one type on cuda");
  *is_signed = t == DType::kI8;
  *lo = *is_signed ? -128 : 0;
  *hi = *is_signed ? 127 : 255;
  return Status::ok();
}

/// A unary op's codes and quantisation: X (0, scale 1, zero point 2), Y (scale 3, zero point 4).
struct UnaryQuant {
  bool is_signed = false;
  int lo = 0, hi = 255;
  ConstantQuant x, y;
};
inline Expected<UnaryQuant> unary_quant(const KernelContext& ctx) {
  UnaryQuant q;
  MOSAIC_RETURN_IF_ERROR(one_code_type(ctx, {0}, &q.is_signed, &q.lo, &q.hi));
  MOSAIC_ASSIGN_OR_RETURN(q.x, constant_quant(ctx, 1, 2, "X"));
  MOSAIC_ASSIGN_OR_RETURN(q.y, constant_quant(ctx, 3, 4, "Y"));
  return q;
}

}  // namespace qlinear_detail

/// QLinearAdd and QLinearMul: A (0, scale 1, zero point 2), B (3, 4, 5), C (scale 6, zero
/// point 7); a Relu the QDQ fusion fused (core/fuse_qdq_codes.cpp).
inline Expected<DevQBinary> qlinear_binary_plan(const KernelContext& ctx) {
  using namespace qlinear_detail;
  DevQBinary q;
  MOSAIC_RETURN_IF_ERROR(one_code_type(ctx, {0, 3}, &q.is_signed, &q.lo, &q.hi));
  const std::string activation = ctx.node->attr_string("mosaic.activation", "");
  if (!activation.empty() && activation != "Relu")
    return Status::unsupported(ctx.node->label() + ": a fused " + activation + " (Relu only on cuda)");
  q.relu = activation == "Relu";
  q.mul = ctx.node->op_type == "QLinearMul";
  if (ctx.outputs[0].shape.size() > 6)
    return Status::unsupported(ctx.node->label() + ": a broadcast over more than 6 dimensions");
  MOSAIC_ASSIGN_OR_RETURN(ConstantQuant a, constant_quant(ctx, 1, 2, "A"));
  MOSAIC_ASSIGN_OR_RETURN(ConstantQuant b, constant_quant(ctx, 4, 5, "B"));
  MOSAIC_ASSIGN_OR_RETURN(ConstantQuant c, constant_quant(ctx, 6, 7, "C"));
  // The oracle's ratios, in its order (backends/common/ms_quantize.cpp's BinaryKernel).
  q.ra = q.mul ? a.scale * b.scale / c.scale : a.scale / c.scale;
  q.rb = b.scale / c.scale;
  q.za = a.zero_point;
  q.zb = b.zero_point;
  q.zc = c.zero_point;
  q.shape = make_broadcast(ctx.inputs[0].shape, ctx.inputs[3].shape, ctx.outputs[0].shape);
  return q;
}

/// QLinearSigmoid and QLinearLeakyRelu: X (0, scale 1, zero point 2), Y (scale 3, zero point
/// 4): the oracle's table of the 256 results, as bytes in CodeLookup's order (an int8 code c
/// at c + 128).
inline Expected<std::vector<uint8_t>> qlinear_lookup_plan(const KernelContext& ctx) {
  MOSAIC_ASSIGN_OR_RETURN(const qlinear_detail::UnaryQuant q, qlinear_detail::unary_quant(ctx));
  int64_t table[256];
  qlinear_lookup_table(ctx.node->op_type == "QLinearSigmoid", ctx.node->attr_float("alpha", 0.01f), q.x.scale,
                       q.x.zero_point, q.y.scale, q.y.zero_point, q.lo, q.hi, table);
  std::vector<uint8_t> bytes(256);
  for (size_t i = 0; i < 256; ++i) bytes[i] = static_cast<uint8_t>(table[i]);
  return bytes;
}

/// QLinearGlobalAveragePool: X (0, scale 1, zero point 2), Y (scale 3, zero point 4).
inline Expected<DevQGlobalPool> qlinear_global_pool_plan(const KernelContext& ctx) {
  MOSAIC_ASSIGN_OR_RETURN(const qlinear_detail::UnaryQuant q, qlinear_detail::unary_quant(ctx));
  DevQGlobalPool p;
  p.is_signed = q.is_signed, p.lo = q.lo, p.hi = q.hi;
  const Shape& in = ctx.inputs[0].shape;
  if (in.size() < 3) return Status::unsupported(ctx.node->label() + ": an input of fewer than 3 dimensions");
  p.channels_last = ctx.node->attr_int("channels_last", 0) != 0;
  const int64_t images = in[0];
  p.channels = p.channels_last ? in.back() : in[1];
  p.spatial = images * p.channels > 0 ? shape_numel(in) / (images * p.channels) : 1;
  p.scale = q.x.scale / (q.y.scale * static_cast<float>(p.spatial));
  p.zx = q.x.zero_point;
  p.zy = q.y.zero_point;
  return p;
}

/// QLinearAveragePool (NCHW): X (0, scale 1, zero point 2), Y (scale 3, zero point 4); the
/// window as the oracle's (qlinear_pool_params, lifted to 3 axes).
inline Expected<DevQAvgPool> qlinear_avg_pool_plan(const KernelContext& ctx) {
  if (ctx.node->attr_int("channels_last", 0) != 0)
    return Status::unsupported(ctx.node->label() + ": channels_last (the oracle's too)");
  MOSAIC_ASSIGN_OR_RETURN(const qlinear_detail::UnaryQuant q, qlinear_detail::unary_quant(ctx));
  DevQAvgPool p;
  p.is_signed = q.is_signed, p.lo = q.lo, p.hi = q.hi;
  MOSAIC_ASSIGN_OR_RETURN(const PoolParams pool, qlinear_pool_params(ctx));
  MOSAIC_ASSIGN_OR_RETURN(const Window3 w, lift_window3(pool.win, *ctx.node));
  for (int a = 0; a < 3; ++a) {
    p.in[a] = w.in[a], p.out[a] = w.out[a], p.k[a] = w.k[a], p.s[a] = w.s[a], p.d[a] = w.d[a];
    p.pb[a] = w.pb[a], p.pe[a] = w.pe[a];
  }
  p.count_include_pad = pool.count_include_pad;
  p.x_scale = q.x.scale, p.y_scale = q.y.scale;
  p.zx = q.x.zero_point, p.zy = q.y.zero_point;
  return p;
}

/// QLinearSoftmax: X (0, scale 1, zero point 2), Y (scale 3, zero point 4), the rows as the
/// oracle's (qlinear_softmax_rows). X's zero point cancels in the softmax.
inline Expected<DevQSoftmax> qlinear_softmax_plan(const KernelContext& ctx) {
  MOSAIC_ASSIGN_OR_RETURN(const qlinear_detail::UnaryQuant q, qlinear_detail::unary_quant(ctx));
  MOSAIC_ASSIGN_OR_RETURN(const SoftmaxRows rows, qlinear_softmax_rows(ctx));
  DevQSoftmax p;
  p.is_signed = q.is_signed, p.lo = q.lo, p.hi = q.hi;
  p.len = rows.len, p.inner = rows.inner;
  p.x_scale = q.x.scale, p.y_scale = q.y.scale;
  p.zy = q.y.zero_point;
  return p;
}

/// QLinearConcat: Y (scale 0, zero point 1), then operand k at 2 + 3k with its scale and zero
/// point; each operand's requantisation into the output.
inline Expected<std::vector<DevQRequant>> qlinear_concat_plan(const KernelContext& ctx) {
  using namespace qlinear_detail;
  const Shape& out = ctx.outputs[0].shape;
  const int64_t rank = static_cast<int64_t>(out.size());
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node->attr_int("axis", 0), rank, *ctx.node));
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < rank; ++d) inner *= out[static_cast<size_t>(d)];
  MOSAIC_ASSIGN_OR_RETURN(ConstantQuant y, constant_quant(ctx, 0, 1, "Y"));
  std::vector<DevQRequant> parts;
  int64_t start = 0;
  for (size_t k = 0; k < qlinear_concat_tensors(ctx); ++k) {
    const size_t i = 2 + 3 * k;
    DevQRequant r;
    MOSAIC_RETURN_IF_ERROR(one_code_type(ctx, {i}, &r.is_signed, &r.lo, &r.hi));
    MOSAIC_ASSIGN_OR_RETURN(ConstantQuant x, constant_quant(ctx, i + 1, i + 2, "operand " + std::to_string(k)));
    const int64_t extent = ctx.inputs[i].shape[static_cast<size_t>(axis)];
    r.run = extent * inner;
    r.out_run = out[static_cast<size_t>(axis)] * inner;
    r.start = start * inner;
    r.copy = x.scale == y.scale && x.zero_point == y.zero_point;
    r.x_scale = x.scale;
    r.y_scale = y.scale;
    r.zx = x.zero_point;
    r.zy = y.zero_point;
    parts.push_back(r);
    start += extent;
  }
  return parts;
}

}  // namespace mosaic::cuda_backend
