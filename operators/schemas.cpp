// Shape inference and FLOP counts for every supported ONNX op.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "operators/attention.hpp"
#include "operators/eltwise.hpp"
#include "operators/indexing.hpp"
#include "operators/normalization.hpp"
#include "operators/conv_transpose.hpp"
#include "operators/einsum.hpp"
#include "operators/deform_conv.hpp"
#include "operators/detection.hpp"
#include "operators/linear_attention.hpp"
#include "operators/selection.hpp"
#include "operators/grid_sample.hpp"
#include "operators/rearrange.hpp"
#include "operators/loss_ops.hpp"
#include "operators/control_flow.hpp"
#include "operators/quantize.hpp"
#include "operators/ms_quantize.hpp"
#include "operators/signal.hpp"
#include "operators/onnx_attention.hpp"
#include "operators/params.hpp"
#include "operators/pointwise.hpp"
#include "operators/reduce.hpp"
#include "operators/resize.hpp"
#include "operators/rnn.hpp"
#include "operators/schema.hpp"

#include "ir/checked.hpp"

namespace mosaic {

namespace {

using Descs = std::vector<TensorDesc>;
using Result = Expected<Descs>;

const TensorDesc& in0(const OpContext& c) { return c.inputs[0]; }

/// A floating-point input (float16, bfloat16, float32, float64: ONNX's T of the float ops).
Status need_float(const OpContext& c, size_t i) {
  if (!dtype_is_float(c.inputs[i].dtype))
    return Status::unsupported(c.node->label() + ": input " + std::to_string(i) + " has dtype " +
                               dtype_name(c.inputs[i].dtype) + "; " + c.node->op_type + " takes floating-point tensors");
  return Status::ok();
}

const Tensor* need_const(const OpContext& c, size_t i, Status* st, const char* what) {
  const Tensor* t = c.has_input(i) ? c.constant(i) : nullptr;
  if (!t) *st = Status::unsupported(c.node->label() + ": input '" + what + "' must be a constant known at load time");
  return t;
}

// ---- inference functions --------------------------------------------------------------

Result infer_identity(const OpContext& c) { return Descs{in0(c)}; }

Result infer_dropout(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(need_float(c, 0));
  bool training = c.node->attr_int("is_test", 1) == 0 && c.opset < 7;
  if (c.opset >= 12 && c.has_input(2)) {
    const Tensor* t = c.constant(2);
    if (!t) return Status::unsupported(c.node->label() + ": training_mode must be a constant");
    training = t->get(0) != 0;
  }
  if (training) return Status::unsupported(c.node->label() + ": Dropout in training mode (inference only here)");
  Descs out{in0(c)};
  if (c.node->has_output(1)) out.push_back({DType::kBool, in0(c).shape});
  return out;
}

/// An element-wise op of the table (operators/eltwise.hpp): float in, the same out; its
/// extra inputs (Clip's bounds) are scalars.
Result infer_unary(const OpContext& c) {
  if (!(dtype_is_integer(in0(c).dtype) && unary_takes_int64(*unary_op_of(c.node->op_type))))
    MOSAIC_RETURN_IF_ERROR(need_float(c, 0));
  for (size_t i = 1; i < c.inputs.size(); ++i)
    if (c.has_input(i) && c.inputs[i].numel() != 1)
      return Status::invalid(c.node->label() + ": input " + std::to_string(i) + " must be a scalar, got " +
                             shape_str(c.inputs[i].shape));
  return Descs{in0(c)};
}

/// A reduction (operators/reduce.hpp): float32 or int64 in, the same out.
Result infer_reduce(const OpContext& c) {
  if (c.inputs[0].dtype == DType::kBool)
    return Status::unsupported(c.node->label() + ": " + c.node->op_type + " of " + dtype_name(c.inputs[0].dtype));
  auto p = reduce_params(c);
  if (!p.ok()) return p.status();
  return Descs{{c.inputs[0].dtype, p->out}};
}

/// A comparison or logical op (kCompareOps): operands of one dtype (bool for And/Or/Xor,
/// float32 or int64 for the comparisons; Equal also bool) to a broadcast bool tensor.
Result infer_compare(const OpContext& c) {
  const CompareOpInfo& op = compare_info(*compare_op_of(c.node->op_type));
  const DType a = c.inputs[0].dtype, b = c.inputs[1].dtype;
  if (a != b)
    return Status::invalid(c.node->label() + ": operand dtypes differ (" + dtype_name(a) + " vs " + dtype_name(b) + ")");
  if (op.logical != (a == DType::kBool) && !(op.op == CompareOp::kEqual && a == DType::kBool))
    return Status::invalid(c.node->label() + ": " + c.node->op_type + " takes " + (op.logical ? "bool" : "numeric") +
                           " operands, got " + dtype_name(a));
  auto s = broadcast_shapes(c.inputs[0].shape, c.inputs[1].shape);
  if (!s.ok()) return s.status().with_context(c.node->label());
  return Descs{{DType::kBool, s.value()}};
}

Result infer_not(const OpContext& c) {
  if (in0(c).dtype != DType::kBool) return Status::invalid(c.node->label() + ": Not takes a bool tensor");
  return Descs{in0(c)};
}

/// Where(cond, a, b): cond bool, a and b of one dtype, all three broadcast together.
Result infer_where(const OpContext& c) {
  if (c.inputs[0].dtype != DType::kBool) return Status::invalid(c.node->label() + ": the condition must be bool");
  if (c.inputs[1].dtype != c.inputs[2].dtype)
    return Status::invalid(c.node->label() + ": operand dtypes differ (" + dtype_name(c.inputs[1].dtype) + " vs " +
                           dtype_name(c.inputs[2].dtype) + ")");
  auto s = broadcast_shapes(c.inputs[0].shape, c.inputs[1].shape);
  if (!s.ok()) return s.status().with_context(c.node->label());
  auto t = broadcast_shapes(s.value(), c.inputs[2].shape);
  if (!t.ok()) return t.status().with_context(c.node->label());
  return Descs{{c.inputs[1].dtype, t.value()}};
}

Result infer_binary(const OpContext& c) {
  if (c.inputs[0].dtype != c.inputs[1].dtype && c.node->op_type == "Pow")  // ONNX allows it; Mosaic does not yet
    return Status::unsupported(c.node->label() + ": Pow of " + dtype_name(c.inputs[0].dtype) + " to a " +
                               dtype_name(c.inputs[1].dtype) + " exponent (operands of one dtype only)");
  if (c.inputs[0].dtype != c.inputs[1].dtype)
    return Status::invalid(c.node->label() + ": operand dtypes differ (" + dtype_name(c.inputs[0].dtype) + " vs " +
                           dtype_name(c.inputs[1].dtype) + ")");
  if (c.inputs[0].dtype == DType::kBool) return Status::unsupported(c.node->label() + ": bool arithmetic");
  if (!dtype_is_float(c.inputs[0].dtype) && !binary_info(*binary_op_of(c.node->op_type)).fi)
    return Status::unsupported(c.node->label() + ": " + c.node->op_type + " of " + dtype_name(c.inputs[0].dtype) +
                               " (floating-point only)");
  auto s = broadcast_shapes(c.inputs[0].shape, c.inputs[1].shape);
  if (!s.ok()) return s.status().with_context(c.node->label());
  return Descs{{c.inputs[0].dtype, s.value()}};
}

Result infer_conv(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(need_float(c, 0));
  MOSAIC_RETURN_IF_ERROR(need_float(c, 1));
  MOSAIC_ASSIGN_OR_RETURN(ConvParams p, conv_params(c));
  Shape out{p.n, p.oc};
  out.insert(out.end(), p.win.out.begin(), p.win.out.end());
  return Descs{{in0(c).dtype, out}};
}

Result infer_pool(const OpContext& c) {
  // MaxPool takes int8 and uint8 too (opset 12): the QOperator models' pools between
  // QLinearConvs.
  const bool int8_max = c.node->op_type == "MaxPool" &&
                        (c.inputs[0].dtype == DType::kI8 || c.inputs[0].dtype == DType::kU8) && c.opset >= 12;
  if (!int8_max) MOSAIC_RETURN_IF_ERROR(need_float(c, 0));
  MOSAIC_ASSIGN_OR_RETURN(PoolParams p, pool_params(c));
  Shape out{p.n, p.c};
  out.insert(out.end(), p.win.out.begin(), p.win.out.end());
  Descs res{{in0(c).dtype, out}};
  if (c.node->has_output(1)) {
    if (c.node->op_type != "MaxPool") return Status::invalid(c.node->label() + ": only MaxPool has a second output");
    res.push_back({DType::kI64, out});
  }
  return res;
}

Result infer_gemm(const OpContext& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.has_input(i)) MOSAIC_RETURN_IF_ERROR(need_float(c, i));
  MOSAIC_ASSIGN_OR_RETURN(GemmParams p, gemm_params(c));
  return Descs{{in0(c).dtype, {p.m, p.n}}};
}

Result infer_matmul(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(need_float(c, 0));
  MOSAIC_RETURN_IF_ERROR(need_float(c, 1));
  auto p = matmul_params(c.inputs[0].shape, c.inputs[1].shape);
  if (!p.ok()) return p.status().with_context(c.node->label());
  return Descs{{in0(c).dtype, p->out}};
}

Result infer_flatten(const OpContext& c) {
  const Shape& x = in0(c).shape;
  const int64_t r = static_cast<int64_t>(x.size());
  int64_t axis = c.node->attr_int("axis", 1);
  if (axis < -r || axis > r) return Status::invalid(c.node->label() + ": axis out of range");
  if (axis < 0) axis += r;
  int64_t a = 1, b = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? a : b) *= x[i];
  return Descs{{in0(c).dtype, {a, b}}};
}

Result infer_reshape(const OpContext& c) {
  Status st;
  std::vector<int64_t> target;
  if (c.opset < 5) {
    target = c.node->attr_ints("shape");
  } else {
    const Tensor* t = need_const(c, 1, &st, "shape");
    if (!t) return st;
    target = t->to_i64_vector();
  }
  const Shape& x = in0(c).shape;
  const bool allowzero = c.node->attr_int("allowzero", 0) != 0;
  Shape out(target.size());
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t d = target[i];
    if (d == 0 && !allowzero) {
      if (i >= x.size()) return Status::invalid(c.node->label() + ": shape has 0 at an axis the input lacks");
      d = x[i];
    }
    if (d == -1) {
      if (infer_at >= 0) return Status::invalid(c.node->label() + ": more than one -1 in shape");
      infer_at = static_cast<int64_t>(i);
      out[i] = 1;
      continue;
    }
    if (d < 0) return Status::invalid(c.node->label() + ": negative dimension in shape");
    out[i] = d;
    if (!checked_mul(known, d, &known))
      return Status::invalid(c.node->label() + ": shape " + shape_str(target) + " has more elements than 2^63");
  }
  const int64_t total = shape_numel(x);
  if (infer_at >= 0) {
    if (known == 0 || total % known)
      return Status::invalid(c.node->label() + ": cannot reshape " + shape_str(x) + " to " + shape_str(target));
    out[infer_at] = total / known;
  } else if (known != total) {
    return Status::invalid(c.node->label() + ": cannot reshape " + shape_str(x) + " (" + std::to_string(total) +
                           " elements) to " + shape_str(out));
  }
  return Descs{{in0(c).dtype, out}};
}

Result infer_transpose(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(auto perm, transpose_perm(c));
  Shape out;
  for (auto p : perm) out.push_back(in0(c).shape[p]);
  return Descs{{in0(c).dtype, out}};
}

Result infer_concat(const OpContext& c) {
  if (!c.node->has_attr("axis")) return Status::invalid(c.node->label() + ": missing attribute axis");
  const int64_t r = static_cast<int64_t>(in0(c).shape.size());
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(c.node->attr_int("axis", 0), r, *c.node));
  Shape out = in0(c).shape;
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    const Shape& s = c.inputs[i].shape;
    if (static_cast<int64_t>(s.size()) != r || c.inputs[i].dtype != in0(c).dtype)
      return Status::invalid(c.node->label() + ": input " + std::to_string(i) + " rank or dtype differs");
    for (int64_t d = 0; d < r; ++d)
      if (d != axis && s[d] != out[d])
        return Status::invalid(c.node->label() + ": input shapes " + shape_str(in0(c).shape) + " and " +
                               shape_str(s) + " differ off the concat axis");
    out[axis] += s[axis];
  }
  return Descs{{in0(c).dtype, out}};
}

Result infer_split(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(const SplitParams p, split_params(c));
  Descs out;
  for (int64_t len : p.sizes) {
    Shape s = in0(c).shape;
    s[static_cast<size_t>(p.axis)] = len;
    out.push_back({in0(c).dtype, s});
  }
  return out;
}

Result infer_pad(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(PadParams p, pad_params(c));
  Shape out = in0(c).shape;
  const size_t r = out.size();
  for (size_t i = 0; i < r; ++i) {
    out[i] += p.pads[i] + p.pads[i + r];
    if (out[i] < 0) return Status::invalid(c.node->label() + ": pads shrink axis " + std::to_string(i) + " below 0");
    if (p.mode == "reflect" && (p.pads[i] >= in0(c).shape[i] || p.pads[i + r] >= in0(c).shape[i]) &&
        (p.pads[i] > 0 || p.pads[i + r] > 0))
      return Status::invalid(c.node->label() + ": reflect pads must be smaller than the axis");
  }
  return Descs{{in0(c).dtype, out}};
}

Result infer_softmax(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(need_float(c, 0));
  MOSAIC_ASSIGN_OR_RETURN(auto p, softmax_params(c));
  (void)p;
  return Descs{in0(c)};
}

Result infer_layer_norm(const OpContext& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.has_input(i)) MOSAIC_RETURN_IF_ERROR(need_float(c, i));
  MOSAIC_ASSIGN_OR_RETURN(const LayerNormParams p, layer_norm_params(c));
  if (c.node->attr_int("stash_type", 1) != 1)
    return Status::unsupported(c.node->label() + ": stash_type other than float32");
  return Descs{in0(c), {DType::kF32, p.stats}, {DType::kF32, p.stats}};
}

Result infer_bn(const OpContext& c) {
  for (size_t i = 0; i < 5; ++i) MOSAIC_RETURN_IF_ERROR(need_float(c, i));
  if (c.node->attr_int("training_mode", 0) != 0 || c.node->has_output(1))
    return Status::unsupported(c.node->label() + ": BatchNormalization in training mode (inference only here)");
  const Shape& x = in0(c).shape;
  if (x.size() < 2) return Status::invalid(c.node->label() + ": input must be N x C x ...");
  for (size_t i = 1; i < 5; ++i)
    if (c.inputs[i].shape != Shape{x[1]})
      return Status::invalid(c.node->label() + ": input " + std::to_string(i) + " must have shape [" +
                             std::to_string(x[1]) + "], got " + shape_str(c.inputs[i].shape));
  return Descs{in0(c)};
}

Result infer_lrn(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(need_float(c, 0));
  MOSAIC_ASSIGN_OR_RETURN(auto p, lrn_params(c));
  (void)p;
  return Descs{in0(c)};
}

// ---- folding-only ops -------------------------------------------------------------------

Expected<DType> onnx_dtype(int64_t code, const Node& node) {
  const DType d = dtype_of_onnx(code);
  if (d == DType::kCount)
    return Status::unsupported(node.label() + ": element type " + onnx_type_name(code) +
                               " (Mosaic has the floats of 16, 32 and 64 bits, the integers of 8 to 64 bits and bool)");
  return d;
}

Result infer_constant(const OpContext& c) {
  const Node& n = *c.node;
  if (n.has_attr("value")) return Descs{n.attrs.at("value").t->desc()};
  if (n.has_attr("value_float") || n.has_attr("value_int")) return Descs{{n.has_attr("value_float") ? DType::kF32 : DType::kI64, {}}};
  if (n.has_attr("value_floats")) return Descs{{DType::kF32, {static_cast<int64_t>(n.attr_floats("value_floats").size())}}};
  if (n.has_attr("value_ints")) return Descs{{DType::kI64, {static_cast<int64_t>(n.attr_ints("value_ints").size())}}};
  return Status::unsupported(n.label() + ": Constant without a supported value attribute");
}

Result infer_constant_of_shape(const OpContext& c) {
  Status st;
  const Tensor* t = need_const(c, 0, &st, "input");
  if (!t) return st;
  DType dt = DType::kF32;
  if (c.node->has_attr("value")) dt = c.node->attrs.at("value").t->dtype();
  return Descs{{dt, t->to_i64_vector()}};
}

Result infer_shape(const OpContext& c) {
  const int64_t r = static_cast<int64_t>(in0(c).shape.size());
  int64_t start = c.node->attr_int("start", 0), end = c.node->attr_int("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  return Descs{{DType::kI64, {std::max<int64_t>(0, end - start)}}};
}

Result infer_size(const OpContext&) { return Descs{{DType::kI64, {}}}; }

/// Sum, Mean, Max, Min of one or more float32 operands, broadcast together.
/// Sum, Mean, Max, Min: float32 operands; Max and Min also int64 ones (compared exactly).
Result infer_variadic(const OpContext& c) {
  Shape out = in0(c).shape;
  const bool integers = dtype_is_integer(in0(c).dtype) && (c.node->op_type == "Max" || c.node->op_type == "Min");
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.inputs[i].dtype != in0(c).dtype)
      return Status::invalid(c.node->label() + ": operand dtypes differ (" + dtype_name(in0(c).dtype) + " vs " +
                             dtype_name(c.inputs[i].dtype) + ")");
    if (!integers) MOSAIC_RETURN_IF_ERROR(need_float(c, i));
    auto s = broadcast_shapes(out, c.inputs[i].shape);
    if (!s.ok()) return s.status().with_context(c.node->label());
    out = s.value();
  }
  return Descs{{in0(c).dtype, out}};
}

/// Expand(x, shape): x broadcast with a constant shape (numpy rules, either side may be 1).
Result infer_expand(const OpContext& c) {
  Status st;
  const Tensor* t = need_const(c, 1, &st, "shape");
  if (!t) return st;
  auto s = broadcast_shapes(in0(c).shape, t->to_i64_vector());
  if (!s.ok()) return s.status().with_context(c.node->label());
  return Descs{{in0(c).dtype, s.value()}};
}

/// Range(start, limit, delta): scalars known at load; max(ceil((limit - start) / delta), 0)
/// elements of start's dtype.
Result infer_range(const OpContext& c) {
  Status st;
  const Tensor* v[3];
  for (size_t i = 0; i < 3; ++i)
    if (!(v[i] = need_const(c, i, &st, i == 0 ? "start" : i == 1 ? "limit" : "delta"))) return st;
  for (size_t i = 0; i < 3; ++i)
    if (v[i]->numel() != 1 || v[i]->dtype() != v[0]->dtype() || v[i]->dtype() == DType::kBool)
      return Status::invalid(c.node->label() + ": start, limit and delta must be numeric scalars of one dtype");
  if (dtype_is_integer(v[0]->dtype())) {  // exactly, in 128 bits: a double rounds past 2^53
    const __int128 start = v[0]->get_i64(0), limit = v[1]->get_i64(0), delta = v[2]->get_i64(0);
    if (delta == 0) return Status::invalid(c.node->label() + ": delta must be non-zero");
    const __int128 span = limit - start;
    // ceil(span / delta), truncating division rounded up where the signs agree
    const __int128 n = span / delta + ((span % delta != 0 && (span > 0) == (delta > 0)) ? 1 : 0);
    if (n > kMaxDim)
      return Status::invalid(c.node->label() + ": " + std::to_string(static_cast<long double>(n)) +
                             " elements, above the largest dimension Mosaic accepts");
    return Descs{{v[0]->dtype(), {n > 0 ? static_cast<int64_t>(n) : 0}}};
  }
  const double start = v[0]->get(0), limit = v[1]->get(0), delta = v[2]->get(0);
  if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
    return Status::invalid(c.node->label() + ": delta must be non-zero and every bound finite");
  const double n = std::max(std::ceil((limit - start) / delta), 0.0);
  if (n > static_cast<double>(kMaxDim))
    return Status::invalid(c.node->label() + ": " + std::to_string(n) + " elements, above the largest dimension Mosaic accepts");
  return Descs{{v[0]->dtype(), {static_cast<int64_t>(n)}}};
}

/// Trilu(x[, k]): the upper (or lower) triangle of each of x's trailing matrices.
Result infer_trilu(const OpContext& c) {
  if (in0(c).shape.size() < 2) return Status::invalid(c.node->label() + ": input must have rank 2 or more");
  if (c.has_input(1)) {
    Status st;
    const Tensor* k = need_const(c, 1, &st, "k");
    if (!k) return st;
    if (k->numel() != 1 || k->dtype() != DType::kI64) return Status::invalid(c.node->label() + ": k must be an int64 scalar");
  }
  return Descs{in0(c)};
}

/// ArgMax / ArgMin: int64 indices along one axis (kept as 1 with keepdims).
Result infer_arg_extreme(const OpContext& c) {
  if (in0(c).dtype == DType::kBool) return Status::invalid(c.node->label() + ": takes a numeric tensor, got bool");
  const Shape& x = in0(c).shape;
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(c.node->attr_int("axis", 0), static_cast<int64_t>(x.size()), *c.node));
  if (x.empty() || x[static_cast<size_t>(axis)] == 0)
    return Status::invalid(c.node->label() + ": no element to choose along axis " + std::to_string(axis));
  Shape out;
  for (int64_t a = 0; a < static_cast<int64_t>(x.size()); ++a)
    if (a != axis) out.push_back(x[a]);
    else if (c.node->attr_int("keepdims", 1) != 0) out.push_back(1);
  return Descs{{DType::kI64, out}};
}

Result infer_gather(const OpContext& c) {
  const Shape& x = in0(c).shape;
  if (!is_index_dtype(c.inputs[1].dtype))
    return Status::invalid(c.node->label() + ": indices must be int64 or int32, got " + dtype_name(c.inputs[1].dtype));
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(c.node->attr_int("axis", 0), static_cast<int64_t>(x.size()), *c.node));
  Shape out(x.begin(), x.begin() + axis);
  out.insert(out.end(), c.inputs[1].shape.begin(), c.inputs[1].shape.end());
  out.insert(out.end(), x.begin() + axis + 1, x.end());
  return Descs{{in0(c).dtype, out}};
}

Expected<std::vector<int64_t>> axes_of(const OpContext& c, bool required) {
  if (c.opset < 13 || c.node->has_attr("axes")) return c.node->attr_ints("axes");
  if (!c.has_input(1)) {
    if (required) return Status::invalid(c.node->label() + ": missing axes");
    return std::vector<int64_t>{};
  }
  Status st;
  const Tensor* t = need_const(c, 1, &st, "axes");
  if (!t) return st;
  return t->to_i64_vector();
}

Result infer_unsqueeze(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(auto axes, axes_of(c, true));
  if (axes.size() > static_cast<size_t>(kMaxRank))
    return Status::invalid(c.node->label() + ": " + std::to_string(axes.size()) + " axes (at most " +
                           std::to_string(kMaxRank) + ")");
  const int64_t r = static_cast<int64_t>(in0(c).shape.size() + axes.size());
  std::vector<bool> is_new(r, false);
  for (auto a : axes) {
    MOSAIC_ASSIGN_OR_RETURN(int64_t ax, normalize_axis(a, r, *c.node));
    if (is_new[ax]) return Status::invalid(c.node->label() + ": repeated axis");
    is_new[ax] = true;
  }
  Shape out;
  size_t j = 0;
  for (int64_t i = 0; i < r; ++i) out.push_back(is_new[i] ? 1 : in0(c).shape[j++]);
  return Descs{{in0(c).dtype, out}};
}

Result infer_squeeze(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(auto axes, axes_of(c, false));
  const Shape& x = in0(c).shape;
  const int64_t r = static_cast<int64_t>(x.size());
  std::vector<bool> drop(r, false);
  if (axes.empty()) {
    for (int64_t i = 0; i < r; ++i) drop[i] = x[i] == 1;
  } else {
    for (auto a : axes) {
      MOSAIC_ASSIGN_OR_RETURN(int64_t ax, normalize_axis(a, r, *c.node));
      if (x[ax] != 1) return Status::invalid(c.node->label() + ": cannot squeeze axis of size " + std::to_string(x[ax]));
      drop[ax] = true;
    }
  }
  Shape out;
  for (int64_t i = 0; i < r; ++i)
    if (!drop[i]) out.push_back(x[i]);
  return Descs{{in0(c).dtype, out}};
}

Result infer_cast(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(DType to, onnx_dtype(c.node->attr_int("to", 1), *c.node));
  return Descs{{to, in0(c).shape}};
}

/// CastLike(x, like): Cast to like's element type.
Result infer_cast_like(const OpContext& c) { return Descs{{c.inputs[1].dtype, in0(c).shape}}; }

}  // namespace

namespace {
Result infer_slice(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(auto ranges, slice_ranges(c));
  Shape out;
  for (auto& r : ranges) out.push_back(r[2]);
  return Descs{{in0(c).dtype, out}};
}
}  // namespace

Expected<std::vector<std::array<int64_t, 3>>> slice_ranges(const OpContext& c) {
  const Shape& x = c.inputs[0].shape;
  const int64_t r = static_cast<int64_t>(x.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset < 10) {
    starts = c.node->attr_ints("starts");
    ends = c.node->attr_ints("ends");
    axes = c.node->attr_ints("axes");
  } else {
    Status st;
    for (size_t i = 1; i < 5; ++i) {
      if (!c.has_input(i)) continue;
      const Tensor* t = need_const(c, i, &st, "starts/ends/axes/steps");
      if (!t) return st;
      (i == 1 ? starts : i == 2 ? ends : i == 3 ? axes : steps) = t->to_i64_vector();
    }
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return Status::invalid(c.node->label() + ": starts/ends/axes/steps lengths differ");
  std::vector<std::array<int64_t, 3>> ranges(r);
  for (int64_t i = 0; i < r; ++i) ranges[i] = {0, 1, x[i]};
  std::vector<bool> seen(static_cast<size_t>(r), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    MOSAIC_ASSIGN_OR_RETURN(int64_t ax, normalize_axis(axes[i], r, *c.node));
    if (seen[static_cast<size_t>(ax)])
      return Status::invalid(c.node->label() + ": axis " + std::to_string(ax) + " is sliced twice (axes " +
                             shape_str(axes) + "); ONNX requires distinct axes");
    seen[static_cast<size_t>(ax)] = true;
    const int64_t d = x[ax], step = steps[i];
    if (step == 0) return Status::invalid(c.node->label() + ": step 0");
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += d;
    if (e < 0) e += d;
    int64_t len;
    // (span - 1) / |step| + 1: no sum that a step near 2^63 could overflow.
    if (d == 0) {  // nothing to take, whatever the bounds (and the clamps below need d >= 1)
      s = 0;
      len = 0;
    } else if (step > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      len = e > s ? (e - s - 1) / step + 1 : 0;
    } else {
      const int64_t back = step == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -step;
      s = std::clamp<int64_t>(s, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      len = s > e ? (s - e - 1) / back + 1 : 0;
    }
    ranges[ax] = {s, step, len};
  }
  return ranges;
}

namespace {

// ---- FLOP counts -----------------------------------------------------------------------

double f_zero(const OpContext&) { return 0; }
double f_conv(const OpContext& c) {
  auto p = conv_params(c);
  if (!p.ok()) return 0;
  double macs = static_cast<double>(p->n) * p->oc * p->win.out_size() * p->c_per_group() * p->win.kernel_size();
  const double out = static_cast<double>(c.outputs[0].numel());
  return 2 * macs + (p->has_bias ? out : 0) + (fused_activation(*c.node).active() ? out : 0);
}
double f_pool(const OpContext& c) {
  auto p = pool_params(c);
  if (!p.ok()) return 0;
  return static_cast<double>(c.outputs[0].numel()) * p->win.kernel_size();
}
double f_gemm(const OpContext& c) {
  auto p = gemm_params(c);
  if (!p.ok()) return 0;
  return 2.0 * p->m * p->n * p->k + (p->has_c && p->beta != 0 ? 1.0 * p->m * p->n : 0) +
         (p->alpha != 1 ? 1.0 * p->m * p->n : 0) + (fused_activation(*c.node).active() ? 1.0 * p->m * p->n : 0);
}
double f_matmul(const OpContext& c) {
  auto p = matmul_params(c.inputs[0].shape, c.inputs[1].shape);
  if (!p.ok()) return 0;
  return 2.0 * shape_numel(p->batch) * p->m * p->n * p->k;
}
double f_softmax(const OpContext& c) { return 4.0 * c.outputs[0].numel(); }  // max, exp, sum, scale
double f_bn(const OpContext& c) { return 2.0 * c.outputs[0].numel(); }        // folded scale+shift
double f_lrn(const OpContext& c) {
  auto p = lrn_params(c);
  return p.ok() ? static_cast<double>(c.outputs[0].numel()) * (2.0 * p->size + 3) : 0;
}
double f_unary(const OpContext& c) { return unary_info(*unary_op_of(c.node->op_type)).flops * c.outputs[0].numel(); }
double f_reduce(const OpContext& c) {
  return reduce_info(*reduce_op_of(c.node->op_type)).flops * static_cast<double>(c.inputs[0].numel());
}
double f_variadic(const OpContext& c) {  // one operation per operand after the first, per output
  return static_cast<double>(c.outputs[0].numel()) * static_cast<double>(std::max<size_t>(c.inputs.size(), 2) - 1);
}
double f_binary(const OpContext& c) { return binary_info(*binary_op_of(c.node->op_type)).flops * c.outputs[0].numel(); }

// Backward: one entry per input, the FLOPs of that input's gradient.
using Grads = std::vector<double>;
double out_numel(const OpContext& c) { return static_cast<double>(c.outputs[0].numel()); }
/// Elementwise ops: `per_input[i]` FLOPs per output element for input i's gradient, plus one
/// add per output element to reduce over broadcast axes when input i is smaller than the output.
Grads elementwise_grads(const OpContext& c, std::vector<double> per_input) {
  Grads g(c.inputs.size(), 0);
  for (size_t i = 0; i < g.size() && i < per_input.size(); ++i)
    if (c.has_input(i))
      g[i] = out_numel(c) * (per_input[i] + (c.inputs[i].numel() < c.outputs[0].numel() ? 1 : 0));
  return g;
}
Grads b_conv(const OpContext& c) {
  auto p = conv_params(c);
  if (!p.ok()) return {};
  const double macs = static_cast<double>(p->n) * p->oc * p->win.out_size() * p->c_per_group() * p->win.kernel_size();
  // dX: the transposed convolution; dW: the correlation of X with dY; dB: a sum over dY.
  return {2 * macs, 2 * macs, p->has_bias ? out_numel(c) : 0};
}
Grads b_gemm(const OpContext& c) {
  auto p = gemm_params(c);
  if (!p.ok()) return {};
  const double mnk = 2.0 * p->m * p->n * p->k, scale = p->alpha != 1 ? 1.0 : 0.0;
  return {mnk + scale * p->m * p->k, mnk + scale * p->k * p->n, p->has_c ? 1.0 * p->m * p->n : 0};
}
Grads b_matmul(const OpContext& c) { return {f_matmul(c), f_matmul(c)}; }
Grads b_unary(const OpContext& c) { return elementwise_grads(c, {unary_info(*unary_op_of(c.node->op_type)).backward_flops}); }
Grads b_pool(const OpContext& c) {
  // Max: one add per output (to its argmax); average: one multiply-add per window element.
  if (c.node->op_type == "MaxPool" || c.node->op_type == "GlobalMaxPool") return {out_numel(c)};
  return {2 * f_pool(c)};
}
Grads b_reduce(const OpContext& c) {
  return {reduce_info(*reduce_op_of(c.node->op_type)).backward_flops * static_cast<double>(c.inputs[0].numel())};
}
Grads b_binary(const OpContext& c) {
  const BinaryOpInfo& b = binary_info(*binary_op_of(c.node->op_type));
  return elementwise_grads(c, {b.backward_flops_a, b.backward_flops_b});
}
Grads b_softmax(const OpContext& c) { return {4 * out_numel(c)}; }             // row dot, then y * (g - dot)
Grads b_bn(const OpContext& c) {
  // Training statistics: dX 5 per element (with the two sums below); dScale = sum(g * xhat)
  // 2 per element; dB = sum(g) 1 per element.
  const double n = out_numel(c);
  return {5 * n, 2 * n, n, 0, 0};
}
Grads b_lrn(const OpContext& c) { return {2 * f_lrn(c)}; }
// LayerNorm: mean 1, variance 3, normalise 2, scale and shift 2 per element; backward dX 8,
// dScale 2, dB 1 per element.
double f_layer_norm(const OpContext& c) { return 8.0 * c.inputs[0].numel(); }
Grads b_layer_norm(const OpContext& c) {
  const double n = static_cast<double>(c.inputs[0].numel());
  return {8 * n, 2 * n, c.has_input(2) ? n : 0};
}
Grads b_dropout(const OpContext& c) { return {out_numel(c)}; }                 // g * mask * scale

/// The ONNX versions each op's semantics cover. By default, from the version in force at
/// opset 7 (the first with numpy broadcasting) to ONNX's newest: the later versions of the
/// ops below changed only their types, which the dtype checks handle, or semantics each
/// schema reads from ctx.opset (axes and split as inputs, Split's num_outputs, Pad's axes
/// and wrap mode, AveragePool's dilations, Shape's start and end). Ops whose older forms
/// Mosaic reads as well start lower.
void set_versions(std::map<std::string, OpSchema>& t) {
  const int latest = onnx_latest_opset();
  const std::map<std::string, int> first = {
      {"Reshape", 1},  // the shape attribute before opset 5
      {"Slice", 1},    // starts, ends and axes attributes before opset 10
      {"Pad", 2},      // pads and value attributes before opset 11 (version 1 called them paddings)
      {"Resize", 10},  // version 10 had no coordinate transformation (Upsample's rules)
      {"Scan", 9},     // Scan 8 had a batch axis and sequence_lens
  };
  for (auto& [op, s] : t) {
    if (!s.domain.empty() || onnx_op_versions(op).empty()) continue;
    auto it = first.find(op);
    int lo = it != first.end() ? it->second : onnx_op_version(op, 7);
    if (lo == 0) lo = onnx_op_versions(op).front();
    s.versions = {{lo, latest}};
  }
  t.at("Upsample").versions = {{7, 9}};  // deprecated at opset 10 for Resize
  t.at("Scatter").versions = {{9, 10}};  // deprecated at opset 11 for ScatterElements
}

/// Adds an op's schema with its outputs' arity and whether it only folds (build_table).
template <class Infer, class Flops>
void add_op(std::map<std::string, OpSchema>& t, const std::string& op, int imin, int imax, int omin, int omax, Infer infer,
            Flops flops, bool fold, std::string summary) {
  OpSchema& s = add_schema(t, op, imin, imax, infer, flops, std::move(summary));
  s.min_outputs = omin;
  s.max_outputs = omax;
  s.folding_only = fold;
}

/// The element-wise ops: one schema per row of their tables (operators/eltwise.hpp), the
/// comparisons and logic, and the variadic Sum, Mean, Max and Min.
void add_elementwise_schemas(std::map<std::string, OpSchema>& t) {
  auto add = [&t](auto&&... args) { add_op(t, args...); };
  for (const UnaryOpInfo& u : kUnaryOps) {
    add(u.name, 1, u.max_inputs, 1, 1, infer_unary, f_unary, false, u.summary);
    if (std::string(u.name).rfind("mosaic.", 0) == 0) t[u.name].domain = kAttentionDomain;  // Mosaic's own rows
    t[u.name].backward_flops = b_unary;
    for (int i = 1; i < u.max_inputs; ++i) t[u.name].non_trainable_inputs.push_back(i);
  }
  for (const ReduceOpInfo& r : kReduceOps) {
    add(r.name, 1, 2, 1, 1, infer_reduce, f_reduce, false, std::string(r.summary) + " over axes (keepdims)");
    t[r.name].backward_flops = b_reduce;
    t[r.name].non_trainable_inputs = {1};
    t[r.name].shape_inputs = {1};  // axes
  }
  for (const CompareOpInfo& op : kCompareOps)
    add(op.name, 2, 2, 1, 1, infer_compare, f_zero, false, std::string(op.summary) + ", numpy broadcasting, to bool");
  add("Not", 1, 1, 1, 1, infer_not, f_zero, false, "logical not of a bool tensor");
  add("Where", 3, 3, 1, 1, infer_where, f_zero, false, "cond ? a : b, numpy broadcasting");
  t["Where"].backward_flops = [](const OpContext& c) -> Grads {
    const double n = static_cast<double>(c.outputs[0].numel());
    return {0, n, n};  // one add per element to the chosen operand's gradient
  };
  for (const BinaryOpInfo& b : kBinaryOps) {
    add(b.name, 2, 2, 1, 1, infer_binary, f_binary, false, std::string(b.summary) + ", numpy broadcasting");
    t[b.name].backward_flops = b_binary;
  }
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
    add(op, 1, 1 << 20, 1, 1, infer_variadic, f_variadic, false, std::string(op) + " of any number of operands, broadcast");
    t[op].backward_flops = [](const OpContext& c) -> Grads {
      return Grads(c.inputs.size(), static_cast<double>(c.outputs[0].numel()));
    };
  }
}

std::map<std::string, OpSchema> build_table() {
  std::map<std::string, OpSchema> t;
  add_elementwise_schemas(t);
  auto add = [&t](auto&&... args) { add_op(t, args...); };
  add("Conv", 2, 3, 1, 1, infer_conv, f_conv, false, "N-d convolution with groups, strides, pads, dilations, auto_pad");
  auto bwd = [&](std::initializer_list<const char*> ops, Grads (*f)(const OpContext&)) {
    for (const char* op : ops) t[op].backward_flops = f;
  };
  add("MaxPool", 1, 1, 1, 2, infer_pool, f_pool, false, "max over windows (pads, ceil_mode, dilations, Indices)");
  add("AveragePool", 1, 1, 1, 1, infer_pool, f_pool, false, "mean over windows (count_include_pad, ceil_mode)");
  add("GlobalAveragePool", 1, 1, 1, 1, infer_pool, f_pool, false, "mean over all spatial positions");
  add("GlobalMaxPool", 1, 1, 1, 1, infer_pool, f_pool, false, "max over all spatial positions");
  add("LpPool", 1, 1, 1, 1, infer_pool, f_pool, false, "p-norm over windows (p, pads, ceil_mode, dilations)");
  add("GlobalLpPool", 1, 1, 1, 1, infer_pool, f_pool, false, "p-norm over all spatial positions");
  add("Gemm", 2, 3, 1, 1, infer_gemm, f_gemm, false, "alpha * op(A) op(B) + beta * C");
  add("MatMul", 2, 2, 1, 1, infer_matmul, f_matmul, false, "numpy matmul with batch broadcasting");
  add("Flatten", 1, 1, 1, 1, infer_flatten, f_zero, false, "reshape to 2-D at axis");
  add("Reshape", 1, 2, 1, 1, infer_reshape, f_zero, false, "reshape (0 copies, -1 infers)");
  add("Transpose", 1, 1, 1, 1, infer_transpose, f_zero, false, "permute axes");
  add("Concat", 1, 1 << 20, 1, 1, infer_concat, f_zero, false, "join along axis");
  add("Split", 1, 2, 1, 1 << 20, infer_split, f_zero, false, "cut along axis into parts (lengths, num_outputs or equal)");
  t["Split"].non_trainable_inputs = {1};
  add("Pad", 1, 4, 1, 1, infer_pad, f_zero, false, "constant / reflect / edge / wrap padding");
  add("Softmax", 1, 1, 1, 1, infer_softmax, f_softmax, false, "exp(x) / sum exp(x) along axis");
  add("LogSoftmax", 1, 1, 1, 1, infer_softmax, f_softmax, false, "x - log sum exp(x) along axis");
  add("Hardmax", 1, 1, 1, 1, infer_softmax, f_softmax, false, "1 at the first largest x along axis, 0 elsewhere");
  add("BatchNormalization", 5, 5, 1, 5, infer_bn, f_bn, false, "inference: scale * (x - mean) / sqrt(var + eps) + B");
  t["BatchNormalization"].non_trainable_inputs = {3, 4};
  add("LRN", 1, 1, 1, 1, infer_lrn, f_lrn, false, "local response normalisation across channels");
  add("LayerNormalization", 2, 3, 1, 3, infer_layer_norm, f_layer_norm, false,
      "(x - mean) / sqrt(var + eps) * Scale + B over the axes from axis on");
  t["LayerNormalization"].backward_flops = b_layer_norm;
  add("Dropout", 1, 3, 1, 2, infer_dropout, f_zero, false, "identity at inference (mask all true)");
  // Hyperparameters given as float initializers are not trained.
  t["Dropout"].non_trainable_inputs = {1, 2};
  t["Pad"].non_trainable_inputs = {1, 2, 3};
  add("Identity", 1, 1, 1, 1, infer_identity, f_zero, false, "copy");
  add("Constant", 0, 0, 1, 1, infer_constant, f_zero, true, "constant from attribute");
  add("ConstantOfShape", 1, 1, 1, 1, infer_constant_of_shape, f_zero, true, "tensor of a given shape filled with value");
  add("Shape", 1, 1, 1, 1, infer_shape, f_zero, true, "shape of the input as int64");
  add("Size", 1, 1, 1, 1, infer_size, f_zero, true, "element count of the input as an int64 scalar");
  add("Expand", 2, 2, 1, 1, infer_expand, f_zero, false, "broadcast to a shape (numpy rules)");
  t["Expand"].non_trainable_inputs = {1};
  add("Range", 3, 3, 1, 1, infer_range, f_zero, true, "start, start + delta, ... below limit");
  add("Trilu", 1, 2, 1, 1, infer_trilu, f_zero, false, "upper or lower triangle of each trailing matrix");
  t["Trilu"].non_trainable_inputs = {1};
  add("ArgMax", 1, 1, 1, 1, infer_arg_extreme, f_zero, false, "index of the largest element along axis");
  add("ArgMin", 1, 1, 1, 1, infer_arg_extreme, f_zero, false, "index of the smallest element along axis");
  add("Gather", 2, 2, 1, 1, infer_gather, f_zero, false, "take along axis (embeddings: backward by scatter-add)");
  t["Gather"].backward_flops = [](const OpContext& c) -> Grads {
    return {static_cast<double>(c.outputs[0].numel()), 0};  // one add per gathered element
  };
  // The recurrent ops (operators/rnn.hpp): lengths and initial states are inputs, not weights.
  add("RNN", 3, 6, 0, 2, infer_rnn, rnn_flops, false, "Elman RNN: H = f(X W^T + H R^T + Wb + Rb), directions, lengths");
  add("GRU", 3, 6, 0, 2, infer_rnn, rnn_flops, false, "GRU (gates z r h; linear_before_reset), directions, lengths");
  add("LSTM", 3, 8, 0, 3, infer_rnn, rnn_flops, false, "LSTM (gates i o f c, peepholes), directions, lengths");
  for (const char* op : {"RNN", "GRU", "LSTM"}) {
    t[op].backward_flops = rnn_backward_flops;
    t[op].non_trainable_inputs = {4, 5, 6};
  }
  // The fused attention node (operators/attention.hpp): a graph only has it after fusion.
  add(kAttentionOp, 3, 4, 1, 1, infer_attention, attention_flops, false,
      "softmax(Q Kt scaled + mask) V, fused from PyTorch's attention ops (inference)");
  t[kAttentionOp].domain = kAttentionDomain;
  add("Unsqueeze", 1, 2, 1, 1, infer_unsqueeze, f_zero, true, "insert unit axes");
  add("Squeeze", 1, 2, 1, 1, infer_squeeze, f_zero, true, "remove unit axes");
  add("Slice", 1, 5, 1, 1, infer_slice, f_zero, true, "strided slice");
  add("Cast", 1, 1, 1, 1, infer_cast, f_zero, true, "convert element type (every float, integer and bool type)");
  add("CastLike", 2, 2, 1, 1, infer_cast_like, f_zero, true, "convert to the element type of the second input");
  t["CastLike"].non_trainable_inputs = {1};
  // Shapes, axes, counts and positions given as inputs (Gather's indices and the recurrent
  // ops' sequence_lens have bounds of their own, core/inputs.hpp).
  for (const auto& [op, slots] : std::vector<std::pair<const char*, std::vector<int>>>{
           {"Reshape", {1}}, {"Expand", {1}}, {"Split", {1}}, {"Pad", {1, 3}}, {"ConstantOfShape", {0}},
           {"Range", {0, 1, 2}}, {"Trilu", {1}}, {"Unsqueeze", {1}}, {"Squeeze", {1}}, {"Slice", {1, 2, 3, 4}}})
    t.at(op).shape_inputs = slots;
  bwd({"Conv"}, b_conv);
  bwd({"Gemm"}, b_gemm);
  bwd({"MatMul"}, b_matmul);
  bwd({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}, b_pool);
  bwd({"Softmax", "LogSoftmax"}, b_softmax);
  bwd({"BatchNormalization"}, b_bn);
  bwd({"LRN"}, b_lrn);
  bwd({"Dropout"}, b_dropout);
  add_pointwise_schemas(t);
  add_indexing_schemas(t);
  add_resize_schema(t);
  add_normalization_schemas(t);
  add_onnx_attention_schema(t);
  add_loss_op_schemas(t);
  add_quantize_schemas(t);
  add_ms_quantize_schemas(t);  // after add_quantize_schemas: the domain's Quantize/DequantizeLinear reuse ONNX's
  add_control_flow_schemas(t);
  add_signal_schemas(t);
  add_einsum_schema(t);
  add_grid_sample_schema(t);
  add_detection_schemas(t);
  add_selection_schemas(t);
  add_rearrange_schemas(t);
  add_conv_transpose_schema(t);
  add_deform_conv_schema(t);
  add_linear_attention_schemas(t);
  set_versions(t);
  return t;
}

std::map<std::string, OpSchema>& table() {
  static std::map<std::string, OpSchema> t = build_table();
  return t;
}

bool onnx_domain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

}  // namespace

OpSchema& add_schema(std::map<std::string, OpSchema>& table, const std::string& op_type, int min_inputs,
                     int max_inputs, Expected<std::vector<TensorDesc>> (*infer)(const OpContext&),
                     double (*flops)(const OpContext&), std::string summary) {
  OpSchema s;
  s.op_type = op_type;
  s.min_inputs = min_inputs;
  s.max_inputs = max_inputs;
  s.infer = infer;
  s.flops = flops;
  s.summary = std::move(summary);
  return table[op_type] = std::move(s);
}

Status check_schema(const OpSchema& schema) {
  const std::string what = "operator " + schema.domain + (schema.domain.empty() ? "" : ".") + schema.op_type;
  if (schema.op_type.empty() || schema.op_type.find_first_of(", =@*\t\n") != std::string::npos)
    return Status::invalid(what + ": the op type must be non-empty, without spaces, ',', '=', '@' or '*'");
  if (onnx_domain(schema.domain) || schema.domain == "mosaic")
    return Status::invalid(what + ": a custom operator needs its own domain (not ONNX's \"\" or \"ai.onnx\", nor Mosaic's "
                                  "\"mosaic\")");
  if (find_schema(op_key(schema.domain, schema.op_type)))
    return Status::invalid(what + ": op type " + schema.op_type + " is already defined in domain " + schema.domain);
  if (!schema.infer || !schema.flops) return Status::invalid(what + ": the schema needs infer and flops functions");
  if (schema.min_inputs < 0 || schema.max_inputs < schema.min_inputs || schema.min_outputs < 1 ||
      schema.max_outputs < schema.min_outputs)
    return Status::invalid(what + ": inconsistent arity");
  return Status::ok();
}

Status add_schemas(std::vector<OpSchema> schemas) {
  std::set<std::string> mine;
  for (const OpSchema& schema : schemas) {
    MOSAIC_RETURN_IF_ERROR(check_schema(schema));
    if (!mine.insert(op_key(schema.domain, schema.op_type)).second)
      return Status::invalid("operator " + schema.domain + "." + schema.op_type + ": defined twice");
  }
  for (OpSchema& schema : schemas) {
    std::string key = op_key(schema.domain, schema.op_type);
    table().emplace(std::move(key), std::move(schema));
  }
  return Status::ok();
}

const OpSchema* find_schema(const std::string& op_type) {
  auto it = table().find(op_type);
  return it == table().end() ? nullptr : &it->second;
}

std::vector<std::string> schema_names() {
  std::vector<std::string> v;
  for (const auto& [k, s] : table()) v.push_back(k);
  return v;
}

Expected<std::vector<TensorDesc>> infer_node(const OpContext& ctx) {
  const Node& node = *ctx.node;
  const OpSchema* s = find_schema(node.op_key());
  if (!s && !onnx_domain(node.domain))
    return Status::unsupported(node.label() + ": operator domain '" + node.domain +
                               "' is not supported (no loaded plugin defines " + node.op_key() +
                               "; load one with --plugin)");
  // An ONNX-domain node never reaches another domain's op (a file naming mosaic.FusedAttention).
  if (!s || (onnx_domain(node.domain) && !s->domain.empty()))
    return Status::unsupported(node.label() + ": operator " + node.op_type + " is not supported by Mosaic");
  MOSAIC_RETURN_IF_ERROR(check_op_version(node, *s, ctx.opset));
  const int nin = static_cast<int>(node.inputs.size());
  if (nin < s->min_inputs || nin > s->max_inputs)
    return Status::invalid(node.label() + ": has " + std::to_string(nin) + " inputs, expected " +
                           std::to_string(s->min_inputs) + ".." + std::to_string(s->max_inputs));
  for (int i = 0; i < s->min_inputs; ++i)
    if (!ctx.has_input(i)) return Status::invalid(node.label() + ": required input " + std::to_string(i) + " is missing");
  const int nout = static_cast<int>(node.outputs.size());
  if (nout < s->min_outputs || nout > s->max_outputs)
    return Status::invalid(node.label() + ": has " + std::to_string(nout) + " outputs, expected " +
                           std::to_string(s->min_outputs) + ".." + std::to_string(s->max_outputs));
  auto r = s->infer(ctx);
  if (!r.ok()) return r;
  r->resize(node.outputs.size(), TensorDesc{});
  // Every inferred size is checked here, once for all ops (and a plugin's): nothing
  // downstream allocates or indexes a shape whose size overflows.
  for (size_t i = 0; i < r->size(); ++i)
    if ((*r)[i].plain())
      MOSAIC_RETURN_IF_ERROR(check_shape((*r)[i].shape, (*r)[i].dtype,
                                         node.label() + ": output " + std::to_string(i) +
                                             (node.has_output(i) ? " '" + node.outputs[i] + "'" : "")));
  return r;
}

double node_flops(const OpContext& ctx) {
  const OpSchema* s = find_schema(ctx.node->op_key());
  return s && s->flops ? s->flops(ctx) : 0.0;
}

std::vector<double> node_backward_flops(const OpContext& ctx) {
  const OpSchema* s = find_schema(ctx.node->op_key());
  std::vector<double> g = s && s->backward_flops ? s->backward_flops(ctx) : std::vector<double>{};
  g.resize(ctx.inputs.size(), 0.0);
  return g;
}

}  // namespace mosaic
