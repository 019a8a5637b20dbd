#include "operators/quantize.hpp"

#include "operators/onnx_versions.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

using Descs = std::vector<TensorDesc>;

bool quantised_type(DType d) {
  int64_t lo, hi;
  return quant_int_range(d, &lo, &hi) || d == DType::kF8E4M3FN || d == DType::kF8E4M3FNUZ || d == DType::kF8E5M2 ||
         d == DType::kF8E5M2FNUZ || d == DType::kF4E2M1;
}

/// The wider of two float types for a division (numpy's promotion: the same type stays,
/// float16 with bfloat16 or float32 is float32, float64 wins).
DType division_type(DType x, DType s) {
  if (!dtype_is_float(x)) return DType::kF64;  // int32 x (opset 10): numpy divides in float64
  if (x == DType::kF64 || s == DType::kF64) return DType::kF64;
  return x == s ? x : DType::kF32;
}

Expected<Descs> infer_quant_linear(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(QuantLinearParams p, quant_linear_params(c));
  return Descs{{p.out, c.inputs[0].shape}};
}

Expected<Descs> infer_dynamic_quantize(const OpContext& c) {
  if (!dtype_is_float(c.inputs[0].dtype))
    return Status::invalid(c.node->label() + ": DynamicQuantizeLinear takes a float tensor, got " +
                           dtype_name(c.inputs[0].dtype));
  return Descs{{DType::kU8, c.inputs[0].shape}, {c.inputs[0].dtype, {}}, {DType::kU8, {}}};
}

Status check_int8(const OpContext& c, size_t i, const char* what) {
  const DType d = c.inputs[i].dtype;
  if (d != DType::kI8 && d != DType::kU8)
    return Status::invalid(c.node->label() + ": " + what + " must be int8 or uint8, got " + dtype_name(d));
  return Status::ok();
}

Expected<Descs> infer_matmul_integer(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(check_int8(c, 0, "A"));
  MOSAIC_RETURN_IF_ERROR(check_int8(c, 1, "B"));
  auto p = matmul_params(c.inputs[0].shape, c.inputs[1].shape);
  if (!p.ok()) return Status::invalid(c.node->label() + ": " + p.status().message());
  return Descs{{DType::kI32, p->out}};
}

Expected<Descs> infer_qlinear_matmul(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(check_int8(c, 0, "a"));
  MOSAIC_RETURN_IF_ERROR(check_int8(c, 3, "b"));
  auto p = matmul_params(c.inputs[0].shape, c.inputs[3].shape);
  if (!p.ok()) return Status::invalid(c.node->label() + ": " + p.status().message());
  if (p->batch.size() + 2 != p->out.size() || p->a_is_vector || p->b_is_vector)
    return Status::invalid(c.node->label() + ": QLinearMatMul takes matrices (rank >= 2), got " +
                           shape_str(c.inputs[0].shape) + " x " + shape_str(c.inputs[3].shape));
  const DType out = c.has_input(7) ? c.inputs[7].dtype : c.inputs[0].dtype;
  if (out != DType::kI8 && out != DType::kU8)
    return Status::invalid(c.node->label() + ": y_zero_point must be int8 or uint8, got " + dtype_name(out));
  return Descs{{out, p->out}};
}

Shape conv_out_shape(const ConvParams& p) {
  Shape out{p.n, p.oc};
  out.insert(out.end(), p.win.out.begin(), p.win.out.end());
  return out;
}

Expected<Descs> infer_conv_integer(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(check_int8(c, 0, "x"));
  MOSAIC_RETURN_IF_ERROR(check_int8(c, 1, "w"));
  MOSAIC_ASSIGN_OR_RETURN(ConvParams p, quant_conv_params(c));
  return Descs{{DType::kI32, conv_out_shape(p)}};
}

Expected<Descs> infer_qlinear_conv(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(check_int8(c, 0, "x"));
  MOSAIC_RETURN_IF_ERROR(check_int8(c, 3, "w"));
  if (c.has_input(8) && c.inputs[8].dtype != DType::kI32)
    return Status::invalid(c.node->label() + ": B must be int32, got " + dtype_name(c.inputs[8].dtype));
  MOSAIC_ASSIGN_OR_RETURN(ConvParams p, quant_conv_params(c));
  const DType out = c.has_input(7) ? c.inputs[7].dtype : c.inputs[0].dtype;
  if (out != DType::kI8 && out != DType::kU8)
    return Status::invalid(c.node->label() + ": y_zero_point must be int8 or uint8, got " + dtype_name(out));
  return Descs{{out, conv_out_shape(p)}};
}

double f_elementwise(const OpContext& c) { return 2.0 * static_cast<double>(c.inputs[0].numel()); }
double f_zero(const OpContext&) { return 0; }

Expected<Descs> infer_code_lookup(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(check_int8(c, 0, "X"));
  MOSAIC_RETURN_IF_ERROR(check_int8(c, 1, "Table"));
  if (c.inputs[1].shape != Shape{256})
    return Status::invalid(c.node->label() + ": Table must be [256], one result per code, got " + shape_str(c.inputs[1].shape));
  return Descs{{c.inputs[1].dtype, c.inputs[0].shape}};
}

double f_matmul_at(const OpContext& c, size_t b) {
  auto p = matmul_params(c.inputs[0].shape, c.inputs[b].shape);
  if (!p.ok()) return 0;
  return 2.0 * static_cast<double>(shape_numel(p->batch)) * static_cast<double>(p->m) * static_cast<double>(p->n) *
         static_cast<double>(p->k);
}
double f_matmul_integer(const OpContext& c) { return f_matmul_at(c, 1); }
double f_qlinear_matmul(const OpContext& c) { return f_matmul_at(c, 3); }

double f_quant_conv(const OpContext& c) {
  auto p = quant_conv_params(c);
  if (!p.ok()) return 0;
  return 2.0 * static_cast<double>(shape_numel(conv_out_shape(*p))) * static_cast<double>(p->c_per_group()) *
         static_cast<double>(p->win.kernel_size());
}

}  // namespace

bool quant_int_range(DType d, int64_t* lo, int64_t* hi) {
  switch (d) {
    case DType::kU8: *lo = 0, *hi = 255; return true;
    case DType::kI8: *lo = -128, *hi = 127; return true;
    case DType::kU16: *lo = 0, *hi = 65535; return true;
    case DType::kI16: *lo = -32768, *hi = 32767; return true;
    case DType::kU4: *lo = 0, *hi = 15; return true;
    case DType::kI4: *lo = -8, *hi = 7; return true;
    case DType::kU2: *lo = 0, *hi = 3; return true;
    case DType::kI2: *lo = -2, *hi = 1; return true;
    default: return false;
  }
}

Expected<QuantLinearParams> quant_linear_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const bool quantize = n.op_type == "QuantizeLinear";
  const TensorDesc &x = ctx.inputs[0], &scale = ctx.inputs[1];
  QuantLinearParams p;
  if (!dtype_is_float(scale.dtype))
    return Status::invalid(n.label() + ": the scale must be a float tensor, got " + dtype_name(scale.dtype));
  p.has_zero_point = ctx.has_input(2);
  if (p.has_zero_point && ctx.inputs[2].shape != scale.shape &&
      !(ctx.inputs[2].numel() == 1 && scale.numel() == 1))
    return Status::invalid(n.label() + ": zero point " + shape_str(ctx.inputs[2].shape) + " and scale " +
                           shape_str(scale.shape) + " differ in shape");
  // Where the scale applies.
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t block = n.attr_int("block_size", 0);
  if (block < 0) return Status::invalid(n.label() + ": block_size " + std::to_string(block) + " is negative");
  QuantScaleLayout& L = p.layout;
  L.inner = x.numel();  // one scale: the whole tensor as one run
  if (scale.numel() != 1) {
    L.inner = 1;
    MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(n.attr_int("axis", 1), rank, n));
    if (rank == 0) return Status::invalid(n.label() + ": a scalar input takes a single scale");
    for (int64_t d = 0; d < axis; ++d) L.outer *= x.shape[static_cast<size_t>(d)];
    L.axis_dim = x.shape[static_cast<size_t>(axis)];
    for (int64_t d = axis + 1; d < rank; ++d) L.inner *= x.shape[static_cast<size_t>(d)];
    if (block == 0) {
      if (scale.shape != Shape{L.axis_dim})
        return Status::invalid(n.label() + ": per-axis scale " + shape_str(scale.shape) + " must be [" +
                               std::to_string(L.axis_dim) + "] (axis " + std::to_string(axis) + " of " +
                               shape_str(x.shape) + ")");
      L.kind = QuantScaleLayout::kAxis;
    } else {
      L.kind = QuantScaleLayout::kBlock;
      L.block = block;
      L.blocks = L.axis_dim / block + (L.axis_dim % block != 0);
      Shape want = x.shape;
      want[static_cast<size_t>(axis)] = L.blocks;
      if (scale.shape != want)
        return Status::invalid(n.label() + ": blocked scale " + shape_str(scale.shape) + " must be " +
                               shape_str(want) + " (x " + shape_str(x.shape) + ", axis " + std::to_string(axis) +
                               ", block_size " + std::to_string(block) + ")");
    }
  }
  const int64_t code = n.attr_int("output_dtype", 0);
  DType attr_type = DType::kCount;
  if (code != 0) {
    attr_type = dtype_of_onnx(code);
    if (attr_type == DType::kCount)
      return Status::unsupported(n.label() + ": output_dtype " + onnx_type_name(code));
  }
  if (quantize) {
    if (!dtype_is_float(x.dtype) && x.dtype != DType::kI32)
      return Status::invalid(n.label() + ": x must be float or int32, got " + dtype_name(x.dtype));
    p.out = DType::kU8;
    if (attr_type != DType::kCount) p.out = attr_type;
    if (p.has_zero_point) {
      if (attr_type != DType::kCount && attr_type != ctx.inputs[2].dtype)
        return Status::invalid(n.label() + ": output_dtype " + dtype_name(attr_type) + " and the zero point's " +
                               dtype_name(ctx.inputs[2].dtype) + " differ");
      p.out = ctx.inputs[2].dtype;
    }
    if (!quantised_type(p.out))
      return Status::invalid(n.label() + ": " + dtype_name(p.out) + " is not a quantised type");
    p.saturate = n.attr_int("saturate", 1) != 0;
    const int64_t precision = n.attr_int("precision", 0);
    if (precision != 0) {
      p.divide_in = dtype_of_onnx(precision);
      if (!dtype_is_float(p.divide_in) || dtype_size(p.divide_in) < 2)
        return Status::invalid(n.label() + ": precision " + onnx_type_name(precision) + " is not a float type");
    } else {
      p.divide_in = division_type(x.dtype, scale.dtype);
    }
  } else {
    if (!quantised_type(x.dtype) && x.dtype != DType::kI32)
      return Status::invalid(n.label() + ": x of type " + dtype_name(x.dtype) + " is not a quantised type");
    if (p.has_zero_point && !dtype_is_float(x.dtype) && ctx.inputs[2].dtype != x.dtype)
      return Status::invalid(n.label() + ": zero point " + dtype_name(ctx.inputs[2].dtype) + " and x " +
                             dtype_name(x.dtype) + " differ in type");
    p.out = attr_type != DType::kCount ? attr_type : scale.dtype;
    if (!dtype_is_float(p.out)) return Status::invalid(n.label() + ": output_dtype must be a float type");
  }
  return p;
}

Expected<ConvParams> quant_conv_params(const OpContext& ctx) {
  const bool qlinear = ctx.node->op_type == "QLinearConv";
  OpContext sub = ctx;
  const size_t w = qlinear ? 3 : 1;
  sub.inputs = {ctx.inputs[0], ctx.inputs[w]};
  sub.input_present = {true, true};
  sub.constants = {ctx.constant(0), ctx.constant(w)};
  if (qlinear && ctx.has_input(8)) {
    sub.inputs.push_back(ctx.inputs[8]);
    sub.input_present.push_back(true);
    sub.constants.push_back(ctx.constant(8));
  }
  return conv_params(sub);
}

void add_quantize_schemas(std::map<std::string, OpSchema>& t) {
  add_schema(t, "QuantizeLinear", 2, 3, infer_quant_linear, f_elementwise,
             "saturate(round_half_even(x / scale) + zero_point): per tensor, axis or block; int2..int16, float8, float4");
  add_schema(t, "DequantizeLinear", 2, 3, infer_quant_linear, f_elementwise,
             "(x - zero_point) * scale: per tensor, axis or block");
  OpSchema& dq = add_schema(t, "DynamicQuantizeLinear", 1, 1, infer_dynamic_quantize, f_elementwise,
                            "uint8 quantisation with the scale and zero point of x's range (and 0)");
  dq.min_outputs = dq.max_outputs = 3;
  add_schema(t, "MatMulInteger", 2, 4, infer_matmul_integer, f_matmul_integer,
             "(A - a_zero_point) x (B - b_zero_point), int32 accumulation");
  add_schema(t, "ConvInteger", 2, 4, infer_conv_integer, f_quant_conv,
             "Conv of (x - x_zero_point) and (w - w_zero_point), int32 accumulation");
  add_schema(t, "QLinearMatMul", 8, 8, infer_qlinear_matmul, f_qlinear_matmul,
             "quantised MatMul: int32 product requantised by a_scale * b_scale / y_scale");
  add_schema(t, "QLinearConv", 8, 9, infer_qlinear_conv, f_quant_conv,
             "quantised Conv with an int32 bias, requantised by x_scale * w_scale / y_scale");
  // A graph has it only after fusion (core/fuse_qdq_codes.cpp): no FLOPs, a byte per element.
  add_schema(t, kCodeLookupOp, 2, 2, infer_code_lookup, f_zero,
             "Table[X - least code]: a QDQ model's per-value float stretch on 8-bit codes (inference)");
  t[kCodeLookupOp].domain = kCodeLookupDomain;
}

}  // namespace mosaic
