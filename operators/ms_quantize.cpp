#include "operators/ms_quantize.hpp"

#include <cmath>

#include "ir/checked.hpp"
#include "operators/params.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

using Descs = std::vector<TensorDesc>;

bool is_int8(DType d) { return d == DType::kI8 || d == DType::kU8; }

/// ONNX Runtime's arity counts the optional zero points between required inputs, so the
/// schemas say "at least 1" and each op checks its count and its required slots here.
Status need_inputs(const OpContext& c, size_t count, std::initializer_list<size_t> required) {
  if (c.inputs.size() < count)
    return Status::invalid(c.node->label() + ": has " + std::to_string(c.inputs.size()) + " inputs, expected at least " +
                           std::to_string(count));
  for (size_t i : required)
    if (!c.has_input(i)) return Status::invalid(c.node->label() + ": required input " + std::to_string(i) + " is missing");
  return Status::ok();
}

Status need_int8(const OpContext& c, size_t i, const char* what) {
  if (!is_int8(c.inputs[i].dtype))
    return Status::invalid(c.node->label() + ": " + what + " must be int8 or uint8, got " + dtype_name(c.inputs[i].dtype));
  return Status::ok();
}

/// A constant scale must be positive and finite (the kernels check run-time ones). Read
/// without OpContext::constant(): a scale given at run time is no value shape inference needs.
Status check_scale_value(const OpContext& c, size_t i, const std::string& what) {
  const Tensor* t = i < c.constants.size() ? c.constants[i] : nullptr;
  if (!t || t->dtype() != DType::kF32) return Status::ok();
  for (int64_t k = 0; k < t->numel(); ++k) MOSAIC_RETURN_IF_ERROR(check_quant_scale(*c.node, t->f32()[k], what));
  return Status::ok();
}

/// A per-tensor scale: one float32 value.
Status need_scale(const OpContext& c, size_t i, const char* what) {
  if (!c.has_input(i)) return Status::invalid(c.node->label() + ": " + what + " is missing");
  const TensorDesc& d = c.inputs[i];
  if (d.dtype != DType::kF32)
    return Status::invalid(c.node->label() + ": " + what + " must be float32, got " + dtype_name(d.dtype));
  if (d.numel() != 1)
    return Status::invalid(c.node->label() + ": " + what + " " + shape_str(d.shape) +
                           " must be one value (per-tensor quantisation)");
  return check_scale_value(c, i, what);
}

/// A per-tensor zero point (optional): one value of the quantised tensor's type.
Status need_zero_point(const OpContext& c, size_t i, DType type, const char* what) {
  if (!c.has_input(i)) return Status::ok();
  const TensorDesc& d = c.inputs[i];
  if (d.dtype != type)
    return Status::invalid(c.node->label() + ": " + what + " is " + dtype_name(d.dtype) + ", its tensor " +
                           dtype_name(type));
  if (d.numel() != 1)
    return Status::invalid(c.node->label() + ": " + what + " " + shape_str(d.shape) +
                           " must be one value (per-tensor quantisation)");
  return Status::ok();
}

/// QLinearAdd, QLinearMul: A (0, scale 1, zero point 2), B (3, 4, 5), C's scale 6 and zero point 7.
Expected<Descs> infer_binary(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(need_inputs(c, 7, {0, 1, 3, 4, 6}));
  MOSAIC_RETURN_IF_ERROR(need_int8(c, 0, "A"));
  const DType t = c.inputs[0].dtype;
  if (c.inputs[3].dtype != t)
    return Status::invalid(c.node->label() + ": A is " + dtype_name(t) + ", B " + dtype_name(c.inputs[3].dtype));
  MOSAIC_RETURN_IF_ERROR(need_scale(c, 1, "A_scale"));
  MOSAIC_RETURN_IF_ERROR(need_zero_point(c, 2, t, "A_zero_point"));
  MOSAIC_RETURN_IF_ERROR(need_scale(c, 4, "B_scale"));
  MOSAIC_RETURN_IF_ERROR(need_zero_point(c, 5, t, "B_zero_point"));
  MOSAIC_RETURN_IF_ERROR(need_scale(c, 6, "C_scale"));
  MOSAIC_RETURN_IF_ERROR(need_zero_point(c, 7, t, "C_zero_point"));
  auto s = broadcast_shapes(c.inputs[0].shape, c.inputs[3].shape);
  if (!s.ok()) return s.status().with_context(c.node->label());
  return Descs{{t, *s}};
}

/// The unary ops (QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, the pools): X (0, scale
/// 1, zero point 2), Y's scale 3 and zero point 4.
Status check_unary(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(need_inputs(c, 4, {0, 1, 3}));
  MOSAIC_RETURN_IF_ERROR(need_int8(c, 0, "X"));
  const DType t = c.inputs[0].dtype;
  MOSAIC_RETURN_IF_ERROR(need_scale(c, 1, "X_scale"));
  MOSAIC_RETURN_IF_ERROR(need_zero_point(c, 2, t, "X_zero_point"));
  MOSAIC_RETURN_IF_ERROR(need_scale(c, 3, "Y_scale"));
  return need_zero_point(c, 4, t, "Y_zero_point");
}

Expected<Descs> infer_unary(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(check_unary(c));
  if (c.node->op_type == "QLinearSoftmax") {
    if (!c.node->has_attr("opset"))
      return Status::invalid(c.node->label() + ": the attribute opset (the Softmax version it follows) is missing");
    MOSAIC_RETURN_IF_ERROR(
        normalize_axis(c.node->attr_int("axis", -1), static_cast<int64_t>(c.inputs[0].shape.size()), *c.node).status());
  }
  return Descs{c.inputs[0]};
}

Expected<Descs> infer_global_pool(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(check_unary(c));
  const Shape& x = c.inputs[0].shape;
  if (x.size() < 3)
    return Status::invalid(c.node->label() + ": X must have a batch, a channel and spatial axes, got " + shape_str(x));
  Shape out(x.size(), 1);
  out[0] = x[0];
  if (c.node->attr_int("channels_last", 0) != 0) out.back() = x.back();
  else out[1] = x[1];
  return Descs{{c.inputs[0].dtype, out}};
}

Expected<Descs> infer_average_pool(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(check_unary(c));
  if (c.node->attr_int("channels_last", 0) != 0)
    return Status::unsupported(c.node->label() + ": channels_last = 1 (NHWC) is not supported; Mosaic pools NCHW");
  MOSAIC_ASSIGN_OR_RETURN(PoolParams p, qlinear_pool_params(c));
  Shape out{p.n, p.c};
  out.insert(out.end(), p.win.out.begin(), p.win.out.end());
  return Descs{{c.inputs[0].dtype, out}};
}

/// QLinearConcat: Y's scale 0 and zero point 1, then (tensor, scale, zero point) per operand.
Expected<Descs> infer_concat(const OpContext& c) {
  const std::string& who = c.node->label();
  if (c.inputs.size() < 5 || (c.inputs.size() - 2) % 3 != 0)
    return Status::invalid(who + ": takes Y_scale, Y_zero_point and (tensor, scale, zero point) triples, got " +
                           std::to_string(c.inputs.size()) + " inputs");
  MOSAIC_RETURN_IF_ERROR(need_scale(c, 0, "Y_scale"));
  if (!c.has_input(1)) return Status::invalid(who + ": Y_zero_point is missing");
  const DType t = c.inputs[1].dtype;
  if (!is_int8(t)) return Status::invalid(who + ": Y_zero_point must be int8 or uint8, got " + dtype_name(t));
  MOSAIC_RETURN_IF_ERROR(need_zero_point(c, 1, t, "Y_zero_point"));
  const size_t n = qlinear_concat_tensors(c);
  const Shape& first = c.inputs[2].shape;
  const int64_t rank = static_cast<int64_t>(first.size());
  if (!c.node->has_attr("axis")) return Status::invalid(who + ": the attribute axis is missing");
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(c.node->attr_int("axis", 0), rank, *c.node));
  Shape out = first;
  out[static_cast<size_t>(axis)] = 0;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = 2 + 3 * k;
    const std::string op = "input " + std::to_string(k);
    if (!c.has_input(i) || !c.has_input(i + 1) || !c.has_input(i + 2))
      return Status::invalid(who + ": " + op + " needs its tensor, scale and zero point");
    if (c.inputs[i].dtype != t)
      return Status::invalid(who + ": " + op + " is " + dtype_name(c.inputs[i].dtype) + ", Y " + dtype_name(t));
    MOSAIC_RETURN_IF_ERROR(need_scale(c, i + 1, (op + "'s scale").c_str()));
    MOSAIC_RETURN_IF_ERROR(need_zero_point(c, i + 2, t, (op + "'s zero point").c_str()));
    const Shape& s = c.inputs[i].shape;
    bool same = s.size() == first.size();
    for (size_t d = 0; same && d < s.size(); ++d) same = static_cast<int64_t>(d) == axis || s[d] == first[d];
    if (!same)
      return Status::invalid(who + ": " + op + " " + shape_str(s) + " and input 0 " + shape_str(first) +
                             " differ off axis " + std::to_string(axis));
    if (!checked_add(out[static_cast<size_t>(axis)], s[static_cast<size_t>(axis)], &out[static_cast<size_t>(axis)]))
      return Status::invalid(who + ": the concatenated axis overflows");
  }
  return Descs{{t, out}};
}

/// QGemm: A (0, scale 1, zero point 2), B (3, scale 4 and zero point 5 per tensor or per
/// column), C (6, int32 in the product's scale), Y's scale 7 and zero point 8 (without them
/// Y is float32).
Expected<Descs> infer_qgemm(const OpContext& c) {
  const std::string& who = c.node->label();
  MOSAIC_RETURN_IF_ERROR(need_inputs(c, 6, {0, 1, 3, 4}));
  MOSAIC_RETURN_IF_ERROR(need_int8(c, 0, "A"));
  MOSAIC_RETURN_IF_ERROR(need_int8(c, 3, "B"));
  MOSAIC_RETURN_IF_ERROR(need_scale(c, 1, "a_scale"));
  MOSAIC_RETURN_IF_ERROR(need_zero_point(c, 2, c.inputs[0].dtype, "a_zero_point"));
  const Shape &a = c.inputs[0].shape, &b = c.inputs[3].shape;
  if (a.size() != 2 || b.size() != 2)
    return Status::invalid(who + ": A and B must be 2-D, got " + shape_str(a) + " and " + shape_str(b));
  const bool ta = c.node->attr_int("transA", 0) != 0, tb = c.node->attr_int("transB", 0) != 0;
  const int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1], kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  if (k != kb) return Status::invalid(who + ": inner dimensions differ: A " + shape_str(a) + " B " + shape_str(b));
  for (size_t i : {size_t{4}, size_t{5}}) {
    if (!c.has_input(i)) continue;
    const TensorDesc& d = c.inputs[i];
    const char* what = i == 4 ? "b_scale" : "b_zero_point";
    if (d.numel() != 1 && d.shape != Shape{n})
      return Status::invalid(who + ": " + what + " " + shape_str(d.shape) + " must be one value or one per column of B ([" +
                             std::to_string(n) + "])");
    if (i == 4 && d.dtype != DType::kF32)
      return Status::invalid(who + ": b_scale must be float32, got " + dtype_name(d.dtype));
    if (i == 4) MOSAIC_RETURN_IF_ERROR(check_scale_value(c, 4, what));
    if (i == 5 && d.dtype != c.inputs[3].dtype)
      return Status::invalid(who + ": b_zero_point is " + dtype_name(d.dtype) + ", B " + dtype_name(c.inputs[3].dtype));
  }
  if (!c.has_input(4)) return Status::invalid(who + ": b_scale is missing");
  if (c.has_input(6)) {
    if (c.inputs[6].dtype != DType::kI32)
      return Status::invalid(who + ": C must be int32, got " + dtype_name(c.inputs[6].dtype));
    auto s = broadcast_shapes(c.inputs[6].shape, Shape{m, n});
    if (!s.ok() || *s != Shape{m, n})
      return Status::invalid(who + ": C " + shape_str(c.inputs[6].shape) + " does not broadcast to [" + std::to_string(m) +
                             "," + std::to_string(n) + "]");
  }
  if (c.has_input(7) != c.has_input(8))
    return Status::invalid(who + ": y_scale and y_zero_point come together (a quantised Y) or not at all (float32 Y)");
  if (!c.has_input(7)) return Descs{{DType::kF32, {m, n}}};
  MOSAIC_RETURN_IF_ERROR(need_scale(c, 7, "y_scale"));
  const DType out = c.inputs[8].dtype;
  if (!is_int8(out)) return Status::invalid(who + ": y_zero_point must be int8 or uint8, got " + dtype_name(out));
  MOSAIC_RETURN_IF_ERROR(need_zero_point(c, 8, out, "y_zero_point"));
  return Descs{{out, {m, n}}};
}

/// MatMulIntegerToFloat: (A - a_zero_point)(B - b_zero_point) accumulated in int32, times
/// a_scale * b_scale (per tensor, B's per column too), + bias [N]: ONNX Runtime's fusion of a
/// dynamically quantised MatMulInteger -> Cast -> Mul [-> Add] (core/fuse_dynamic.cpp makes
/// it too). Inputs: A 0, B 1, a_scale 2, b_scale 3, a_zero_point 4, b_zero_point 5, bias 6.
Expected<Descs> infer_matmul_integer_to_float(const OpContext& c) {
  const std::string& who = c.node->label();
  MOSAIC_RETURN_IF_ERROR(need_inputs(c, 4, {0, 1, 2, 3}));
  MOSAIC_RETURN_IF_ERROR(need_int8(c, 0, "A"));
  MOSAIC_RETURN_IF_ERROR(need_int8(c, 1, "B"));
  auto p = matmul_params(c.inputs[0].shape, c.inputs[1].shape);
  if (!p.ok()) return Status::invalid(who + ": " + p.status().message());
  MOSAIC_RETURN_IF_ERROR(need_scale(c, 2, "a_scale"));
  MOSAIC_RETURN_IF_ERROR(need_zero_point(c, 4, c.inputs[0].dtype, "a_zero_point"));
  for (size_t i : {size_t{3}, size_t{5}, size_t{6}}) {
    if (!c.has_input(i)) continue;
    const TensorDesc& d = c.inputs[i];
    const char* what = i == 3 ? "b_scale" : i == 5 ? "b_zero_point" : "bias";
    if ((i != 6 && d.numel() != 1 && d.shape != Shape{p->n}) || (i == 6 && d.shape != Shape{p->n}))
      return Status::invalid(who + ": " + what + " " + shape_str(d.shape) +
                             (i == 6 ? " must be one per column of B ([" : " must be one value or one per column of B ([") +
                             std::to_string(p->n) + "])");
    if (i != 5 && d.dtype != DType::kF32)
      return Status::unsupported(who + ": " + what + " is " + dtype_name(d.dtype) + "; Mosaic reads float32 scales and bias");
    if (i == 3) MOSAIC_RETURN_IF_ERROR(check_scale_value(c, 3, what));
    if (i == 5 && d.dtype != c.inputs[1].dtype)
      return Status::invalid(who + ": b_zero_point is " + dtype_name(d.dtype) + ", B " + dtype_name(c.inputs[1].dtype));
  }
  return Descs{{DType::kF32, p->out}};
}

double f_matmul_integer_to_float(const OpContext& c) {
  auto p = matmul_params(c.inputs[0].shape, c.inputs[1].shape);
  if (!p.ok()) return 0;
  return 2.0 * static_cast<double>(shape_numel(p->out)) * static_cast<double>(p->k);
}

/// MatMulNBits: A [..., K] times the block-quantised weights B [N, K/block, block * bits / 8]
/// (scales and zero points per block) transposed.
Expected<Descs> infer_matmul_nbits(const OpContext& c) {
  const std::string& who = c.node->label();
  MOSAIC_RETURN_IF_ERROR(need_inputs(c, 3, {0, 1, 2}));
  MOSAIC_ASSIGN_OR_RETURN(MatMulNBitsParams p, matmul_nbits_params(c));
  const TensorDesc& a = c.inputs[0];
  if (a.dtype != DType::kF32 && a.dtype != DType::kF16 && a.dtype != DType::kBF16)
    return Status::invalid(who + ": A must be float32, float16 or bfloat16, got " + dtype_name(a.dtype));
  if (a.shape.empty() || a.shape.back() != p.k)
    return Status::invalid(who + ": A " + shape_str(a.shape) + " must end in K = " + std::to_string(p.k));
  auto count = [&](size_t i, int64_t want, const char* what) -> Status {
    if (c.inputs[i].numel() != want)
      return Status::invalid(who + ": " + what + " " + shape_str(c.inputs[i].shape) + " must hold " + std::to_string(want) +
                             " values (N = " + std::to_string(p.n) + ", " + std::to_string(p.blocks) + " blocks of " +
                             std::to_string(p.block_size) + " along K = " + std::to_string(p.k) + ", " +
                             std::to_string(p.bits) + " bits)");
    return Status::ok();
  };
  if (c.inputs[1].dtype != DType::kU8) return Status::invalid(who + ": B must be uint8, got " + dtype_name(c.inputs[1].dtype));
  int64_t b_bytes = 0, per_row = 0;
  if (!checked_mul(p.n, p.blocks, &per_row) || !checked_mul(per_row, p.block_size * p.bits / 8, &b_bytes))
    return Status::invalid(who + ": N x K overflows");
  MOSAIC_RETURN_IF_ERROR(count(1, b_bytes, "B"));
  if (c.inputs[2].dtype != a.dtype)
    return Status::invalid(who + ": scales are " + dtype_name(c.inputs[2].dtype) + ", A " + dtype_name(a.dtype));
  MOSAIC_RETURN_IF_ERROR(count(2, per_row, "scales"));
  if (c.has_input(3)) {
    if (c.inputs[3].dtype == DType::kU8) {
      int64_t zp_bytes = 0;
      if (!checked_mul(p.n, p.zero_point_row_bytes(), &zp_bytes)) return Status::invalid(who + ": N x K overflows");
      MOSAIC_RETURN_IF_ERROR(count(3, zp_bytes, "packed zero_points"));
    } else if (c.inputs[3].dtype == a.dtype) {
      MOSAIC_RETURN_IF_ERROR(count(3, per_row, "zero_points"));
    } else {
      return Status::invalid(who + ": zero_points must be uint8 (packed) or A's type, got " + dtype_name(c.inputs[3].dtype));
    }
  }
  if (c.has_input(4)) return Status::unsupported(who + ": g_idx (deprecated, a permuted K) is not supported");
  if (c.has_input(5)) {
    if (c.inputs[5].dtype != a.dtype || c.inputs[5].shape != Shape{p.n})
      return Status::invalid(who + ": bias must be " + dtype_name(a.dtype) + " [" + std::to_string(p.n) + "], got " +
                             dtype_name(c.inputs[5].dtype) + " " + shape_str(c.inputs[5].shape));
  }
  Shape out(a.shape.begin(), a.shape.end() - 1);
  out.push_back(p.n);
  return Descs{{a.dtype, out}};
}

double f_matmul_nbits(const OpContext& c) {
  if (c.outputs.empty()) return 0;
  return 2.0 * static_cast<double>(c.outputs[0].numel()) * static_cast<double>(c.node->attr_int("K", 0));
}

double f_elementwise(const OpContext& c) { return 2.0 * static_cast<double>(c.outputs.empty() ? 0 : c.outputs[0].numel()); }
double f_input(const OpContext& c) { return 2.0 * static_cast<double>(c.inputs[0].numel()); }
double f_qgemm(const OpContext& c) {
  if (c.outputs.empty() || c.inputs[0].shape.size() != 2) return 0;
  const bool ta = c.node->attr_int("transA", 0) != 0;
  const int64_t k = ta ? c.inputs[0].shape[0] : c.inputs[0].shape[1];
  return 2.0 * static_cast<double>(c.outputs[0].numel()) * static_cast<double>(k);
}

}  // namespace

IntegerProductSlots integer_product_slots(const Node& n) {
  IntegerProductSlots s;
  if (n.domain == kMicrosoftDomain && n.op_type == "QGemm") {
    s.gemm = true;
    s.requantise = n.inputs.size() > 7 && !n.inputs[7].empty();
    s.to_float = !s.requantise;
    s.ta = n.attr_int("transA", 0) != 0;
    s.tb = n.attr_int("transB", 0) != 0;
    s.alpha = n.attr_float("alpha", 1.f);
    s.a_scale = 1, s.a_zp = 2, s.b = 3, s.b_scale = 4, s.b_zp = 5, s.c = 6, s.y_scale = 7, s.y_zp = 8;
  } else if (n.domain == kMicrosoftDomain) {
    s.to_float = true;
    s.a_scale = 2, s.b_scale = 3, s.a_zp = 4, s.b_zp = 5, s.bias = 6;
  } else if (n.op_type == "QLinearMatMul") {
    s.requantise = true;
    s.a_scale = 1, s.a_zp = 2, s.b = 3, s.b_scale = 4, s.b_zp = 5, s.y_scale = 6, s.y_zp = 7;
  }
  return s;
}

Status check_quant_scale(const Node& node, float scale, const std::string& what) {
  if (!(scale > 0.f) || !std::isfinite(scale))
    return Status::invalid(node.label() + ": " + what + " is " + std::to_string(scale) +
                           "; a scale must be positive and finite");
  return Status::ok();
}

Expected<SoftmaxRows> qlinear_softmax_rows(const OpContext& ctx) {
  const Shape& x = ctx.inputs[0].shape;
  const int64_t rank = static_cast<int64_t>(x.size());
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node->attr_int("axis", -1), rank, *ctx.node));
  const bool coerce_2d = ctx.node->attr_int("opset", 13) < 13;
  SoftmaxRows r;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t v = x[static_cast<size_t>(d)];
    if (d < axis) r.outer *= v;
    else if (d == axis || coerce_2d) r.len *= v;
    else r.inner *= v;
  }
  return r;
}

Expected<PoolParams> qlinear_pool_params(const OpContext& ctx) {
  OpContext x = ctx;
  x.inputs.resize(1);
  x.input_present.resize(1);
  x.constants.resize(1);
  return pool_params(x);
}

Expected<MatMulNBitsParams> matmul_nbits_params(const OpContext& c) {
  const Node& n = *c.node;
  for (const char* a : {"K", "N", "block_size"})
    if (!n.has_attr(a)) return Status::invalid(n.label() + ": the attribute " + a + " is missing");
  MatMulNBitsParams p;
  p.k = n.attr_int("K", 0);
  p.n = n.attr_int("N", 0);
  p.bits = n.attr_int("bits", 4);
  p.block_size = n.attr_int("block_size", 0);
  if (p.k < 1 || p.n < 1)
    return Status::invalid(n.label() + ": K " + std::to_string(p.k) + " and N " + std::to_string(p.n) + " must be positive");
  if (p.bits != 2 && p.bits != 4 && p.bits != 8)
    return Status::unsupported(n.label() + ": bits " + std::to_string(p.bits) + " (Mosaic reads 2, 4 and 8)");
  if (p.block_size < 16 || p.block_size > (int64_t{1} << 20) || (p.block_size & (p.block_size - 1)) != 0)
    return Status::invalid(n.label() + ": block_size " + std::to_string(p.block_size) +
                           " must be a power of two from 16 (to 2^20)");
  p.blocks = p.k / p.block_size + (p.k % p.block_size != 0);
  return p;
}

void add_ms_quantize_schemas(std::map<std::string, OpSchema>& t) {
  auto add = [&](const char* op, int imin, int imax, Expected<Descs> (*infer)(const OpContext&),
                 double (*flops)(const OpContext&), const char* summary) -> OpSchema& {
    OpSchema& s = add_schema(t, op_key(kMicrosoftDomain, op), imin, imax, infer, flops, summary);
    s.op_type = op;
    s.domain = kMicrosoftDomain;
    return s;
  };
  add("QLinearAdd", 1, 8, infer_binary, f_elementwise, "quantise(dequantise(A) + dequantise(B)), broadcast");
  add("QLinearMul", 1, 8, infer_binary, f_elementwise, "quantise(dequantise(A) * dequantise(B)), broadcast");
  add("QLinearSigmoid", 1, 5, infer_unary, f_input, "quantise(sigmoid(dequantise(X)))");
  add("QLinearLeakyRelu", 1, 5, infer_unary, f_input, "quantise(leaky_relu(dequantise(X), alpha))");
  add("QLinearSoftmax", 1, 5, infer_unary, f_input, "quantise(softmax(dequantise(X))) along axis, by the Softmax of opset");
  add("QLinearGlobalAveragePool", 1, 5, infer_global_pool, f_input,
      "quantise(mean over the spatial axes of dequantise(X)), NCHW or NHWC");
  add("QLinearAveragePool", 1, 5, infer_average_pool, f_input, "quantise(AveragePool(dequantise(X))), NCHW");
  add("QLinearConcat", 5, 1 << 20, infer_concat, f_input,
      "each operand requantised to Y's scale and zero point, concatenated along axis");
  add("QGemm", 1, 9, infer_qgemm, f_qgemm,
      "int32 (A - a_zp)(B - b_zp) + C scaled by alpha a_scale b_scale (B per column), quantised or float32");
  add("MatMulIntegerToFloat", 4, 7, infer_matmul_integer_to_float, f_matmul_integer_to_float,
      "(A - a_zp)(B - b_zp) in int32, times a_scale * b_scale (B per column), + bias: float32");
  add("MatMulNBits", 1, 6, infer_matmul_nbits, f_matmul_nbits,
      "A x dequantised B^T: B in 2-, 4- or 8-bit blocks along K, a scale and zero point per block (+ bias)");
  // The domain's QuantizeLinear and DequantizeLinear: ONNX's (quant_linear_params), whatever
  // the model's ONNX opset (16-bit and 4-bit types included).
  const OpSchema& q = t.at("QuantizeLinear");
  const OpSchema& dq = t.at("DequantizeLinear");
  add("QuantizeLinear", q.min_inputs, q.max_inputs, q.infer, q.flops, "ONNX's QuantizeLinear in com.microsoft's domain");
  add("DequantizeLinear", dq.min_inputs, dq.max_inputs, dq.infer, dq.flops,
      "ONNX's DequantizeLinear in com.microsoft's domain");
}

}  // namespace mosaic
