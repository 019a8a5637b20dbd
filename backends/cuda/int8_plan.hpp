// The cuda backend's integer products planned on the host (issue 52): from a node's context,
// what quant.cpp's kernels hand to the device: the packing of A (a matrix product's rows, or
// a convolution's gathered columns), the weights packed once with their column sums, the
// multipliers as the naive oracle forms them, the epilogue's geometry and which of the run's
// inputs it reads, and the parameters of the cuBLAS call. Header-only and free of CUDA, so
// that tests/test_cuda_math.cpp plans the same nodes and runs the plan on the host (a plain
// product in cuBLAS's column-major "TN" semantics standing in for the library) against the
// oracle. device_quant.hpp has the per-element functions and why the packed sums are exact.
//
// Declined with the reason (the planner falls back): weights that are not a constant int8
// tensor with zero point 0, scales and output zero points that are not constants (they fix
// the multipliers at plan time; MatMulIntegerToFloat's A scale is read each run), a zero
// point per row, a K so long that 255 x 128 x K could wrap the int32 sum, and dimensions
// beyond cuBLAS's 32-bit sizes.
#pragma once

#include <climits>
#include <limits>
#include <string>
#include <vector>

#include "backends/common/quantize.hpp"
#include "backends/cuda/device_quant.hpp"
#include "core/kernel.hpp"
#include "operators/ms_quantize.hpp"
#include "operators/quantize.hpp"

namespace mosaic::cuda_backend {

inline bool is_code_type(DType t) { return t == DType::kU8 || t == DType::kI8; }

/// K padded for cuBLAS's int8 kernels to 16 bytes, the output columns to 4.
inline constexpr int64_t kInt8KAlign = 16, kInt8NAlign = 4;
/// The longest K whose sums of (a - zp) x w, |a - zp| <= 255 and |w| <= 128, fit in int32.
inline constexpr int64_t kInt8MaxK = std::numeric_limits<int32_t>::max() / (255 * 128);

/// One planned product. `weights` is filled where the plan was asked to pack.
struct Int8Plan {
  IntEpilogue e;
  int64_t kp = 0;
  bool convolution = false;
  RowPack row;
  ConvPack conv;
  PackedWeights weights;
  std::vector<float> multipliers;  ///< empty: none (an int32 output)
  /// The run's inputs the pack and the epilogue read beyond A (0: none): A's zero point where
  /// a run computes it, an int32 bias, a float32 bias, A's scale.
  size_t a_zp_slot = 0, bias_i32_slot = 0, bias_f32_slot = 0, a_scale_slot = 0;
  int64_t packed_bytes() const { return e.groups * e.rows * kp; }
};

/// cuBLAS's int8 product for a plan: C (np x rows, column-major) = op(W) x A' with W's
/// packed columns (kp x np column-major, transposed: "T") and A' (kp x rows, "N"), each
/// group `stride_*` elements after the last; the int32 sums land as [groups][rows][np].
struct Int8GemmCall {
  int m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0, batch = 1;
  long long stride_a = 0, stride_b = 0, stride_c = 0;
};
inline Int8GemmCall int8_gemm_call(const Int8Plan& p) {
  Int8GemmCall c;
  c.m = static_cast<int>(p.e.np);
  c.n = static_cast<int>(p.e.rows);
  c.k = static_cast<int>(p.kp);
  c.lda = c.ldb = c.k;
  c.ldc = c.m;
  c.batch = static_cast<int>(p.e.groups);
  c.stride_a = static_cast<long long>(p.e.np) * p.kp;
  c.stride_b = static_cast<long long>(p.e.rows) * p.kp;
  c.stride_c = static_cast<long long>(p.e.rows) * p.e.np;
  return c;
}

namespace int8_detail {

/// The scalar constant at input i, or nullptr (absent, computed at run time, not one value).
inline const Tensor* scalar_constant(const KernelContext& ctx, size_t i) {
  const Tensor* t = i > 0 && ctx.has_input(i) ? ctx.constant(i) : nullptr;
  return t && t->numel() == 1 ? t : nullptr;
}

/// Weights with zero point 0: an absent zero point or a constant of zeros.
inline Status zero_weight_zero_point(const KernelContext& ctx, size_t i) {
  if (i == 0 || !ctx.has_input(i)) return Status::ok();
  const Tensor* z = ctx.constant(i);
  if (!z) return Status::unsupported(ctx.node->label() + ": the weights' zero point is computed at run time");
  for (int64_t j = 0; j < z->numel(); ++j)
    if (z->get(j) != 0) return Status::unsupported(ctx.node->label() + ": weights with a nonzero zero point");
  return Status::ok();
}

/// A's zero point (input i): its value where constant, else its slot, read on the device;
/// and the packing's shift for A's type.
inline Status activation_codes(const KernelContext& ctx, size_t i, Int8Plan* p) {
  p->e.a_zp_signed = ctx.inputs[0].dtype == DType::kI8;
  p->e.shift = p->e.a_zp_signed ? 0 : 128;
  if (i == 0 || !ctx.has_input(i)) return Status::ok();
  if (ctx.inputs[i].numel() != 1 || ctx.inputs[i].dtype != ctx.inputs[0].dtype)
    return Status::unsupported(ctx.node->label() + ": a zero point per row, or of another type than the input");
  if (const Tensor* z = ctx.constant(i)) p->e.a_zero_point = static_cast<int>(z->get_i64(0));
  else p->a_zp_slot = i;
  return Status::ok();
}

/// The float32 values of a constant scale input: one, or `n` (per column or channel).
inline Expected<std::vector<float>> constant_scales(const KernelContext& ctx, size_t i, int64_t n, const char* what) {
  const Tensor* t = ctx.constant(i);
  if (!t || t->dtype() != DType::kF32 || (t->numel() != 1 && t->numel() != n))
    return Status::unsupported(ctx.node->label() + ": " + what + " must be a float32 constant of 1 or " +
                               std::to_string(n) + " values");
  return std::vector<float>(t->f32(), t->f32() + t->numel());
}

/// A requantising op's output: uint8 or int8, its range and its constant zero point.
inline Status requantised_output(const KernelContext& ctx, size_t y_zp, DevIntOut out, Int8Plan* p) {
  const DType t = ctx.outputs[0].dtype;
  if (!is_code_type(t)) return Status::unsupported(ctx.node->label() + ": a uint8 or int8 output");
  const Tensor* z = scalar_constant(ctx, y_zp);
  if (ctx.has_input(y_zp) && !z) return Status::unsupported(ctx.node->label() + ": y's zero point must be a constant");
  p->e.out = out;
  p->e.y_signed = t == DType::kI8;
  p->e.lo = p->e.y_signed ? -128 : 0;
  p->e.hi = p->e.y_signed ? 127 : 255;
  p->e.y_zero_point = z ? static_cast<int>(z->get_i64(0)) : 0;
  return Status::ok();
}

/// The products compute their node alone: a fused activation (the fusion pass's attribute) is
/// declined rather than left out.
inline Status no_fused_activation(const KernelContext& ctx) {
  if (ctx.node->has_attr("mosaic.activation"))
    return Status::unsupported(ctx.node->label() + ": a fused activation on an integer product");
  return Status::ok();
}

inline Status fits_cublas(const KernelContext& ctx, const Int8Plan& p) {
  if (p.e.rows > INT32_MAX || p.e.np > INT32_MAX || p.kp > INT32_MAX || p.e.groups > INT32_MAX)
    return Status::unsupported(ctx.node->label() + ": dimensions beyond cuBLAS's 32-bit sizes");
  return Status::ok();
}

/// The multipliers of a matrix product as the oracle forms them (backends/common/quantize.cpp
/// and ms_quantize.cpp), per column where B's scale is.
inline Status product_multipliers(const KernelContext& ctx, const IntegerProductSlots& s, int64_t n, Int8Plan* p) {
  if (!s.requantise && !s.to_float) {
    p->e.out = DevIntOut::kInt32;
    return Status::ok();
  }
  MOSAIC_ASSIGN_OR_RETURN(std::vector<float> b_scale, constant_scales(ctx, s.b_scale, n, "b_scale"));
  p->e.per_column = b_scale.size() > 1;
  if (!s.gemm && s.to_float) {  // MatMulIntegerToFloat: a_scale (each run) x b_scale[n], + bias
    if (ctx.inputs[s.a_scale].numel() != 1 || ctx.inputs[s.a_scale].dtype != DType::kF32)
      return Status::unsupported(ctx.node->label() + ": a float32 a_scale of one value");
    p->e.out = DevIntOut::kFloat;
    p->a_scale_slot = s.a_scale;
    p->multipliers = b_scale;
    return Status::ok();
  }
  const Tensor* a_scale = scalar_constant(ctx, s.a_scale);
  const Tensor* y_scale = s.requantise ? scalar_constant(ctx, s.y_scale) : nullptr;
  if (!a_scale || a_scale->dtype() != DType::kF32 || (s.requantise && (!y_scale || y_scale->dtype() != DType::kF32)))
    return Status::unsupported(ctx.node->label() + ": a_scale and y_scale must be float32 constants of one value");
  const float as = a_scale->f32()[0], ys = y_scale ? y_scale->f32()[0] : 1.f;
  p->multipliers.resize(b_scale.size());
  if (!s.gemm) {  // QLinearMatMul
    for (size_t j = 0; j < b_scale.size(); ++j) p->multipliers[j] = static_cast<float>(qlinear_multiplier(as, b_scale[j], ys));
    return requantised_output(ctx, s.y_zp, DevIntOut::kQLinear, p);
  }
  // QGemm: alpha * a_scale * b_scale [/ y_scale] in float32, every scale checked as the oracle does.
  MOSAIC_RETURN_IF_ERROR(check_quant_scale(*ctx.node, as, "a_scale"));
  if (y_scale) MOSAIC_RETURN_IF_ERROR(check_quant_scale(*ctx.node, ys, "y_scale"));
  for (size_t j = 0; j < b_scale.size(); ++j) {
    MOSAIC_RETURN_IF_ERROR(check_quant_scale(*ctx.node, b_scale[j], "b_scale"));
    const float product = s.alpha * as * b_scale[j];
    p->multipliers[j] = y_scale ? product / ys : product;
  }
  if (s.requantise) return requantised_output(ctx, s.y_zp, DevIntOut::kQGemm, p);
  p->e.out = DevIntOut::kFloat;
  return Status::ok();
}

}  // namespace int8_detail

/// QLinearMatMul, MatMulInteger, QGemm and MatMulIntegerToFloat (operators/ms_quantize.hpp's
/// slots): A [..., K] (QGemm's [K, rows] with transA), B a constant int8 [K, N] ([N, K] with
/// transB). `pack`: also pack the weights (the kernel; the capability query only checks).
inline Expected<Int8Plan> int8_matmul_plan(const KernelContext& ctx, bool pack) {
  using namespace int8_detail;
  const std::string& label = ctx.node->label();
  MOSAIC_RETURN_IF_ERROR(no_fused_activation(ctx));
  const IntegerProductSlots s = integer_product_slots(*ctx.node);
  const Tensor* b = ctx.constant(s.b);
  const Shape& as = ctx.inputs[0].shape;
  if (!is_code_type(ctx.inputs[0].dtype) || !b || b->dtype() != DType::kI8 || b->shape().size() != 2)
    return Status::unsupported(label + ": the cuda backend's int8 products take uint8/int8 A and constant int8 B [K, N]");
  const int64_t k = b->shape()[s.tb ? 1 : 0], n = b->shape()[s.tb ? 0 : 1];
  if (as.empty() || (s.gemm && as.size() != 2) || as[s.ta ? 0 : as.size() - 1] != k)
    return Status::unsupported(label + ": A " + shape_str(as) + " against B " + shape_str(b->shape()));
  if (k > kInt8MaxK) return Status::unsupported(label + ": K = " + std::to_string(k) + " could wrap the int32 sum");
  Int8Plan p;
  MOSAIC_RETURN_IF_ERROR(zero_weight_zero_point(ctx, s.b_zp));
  MOSAIC_RETURN_IF_ERROR(activation_codes(ctx, s.a_zp, &p));
  p.e.rows = k > 0 ? ctx.inputs[0].numel() / k : 0;
  p.e.n = n;
  p.e.np = round_up(n, kInt8NAlign);
  p.kp = round_up(std::max<int64_t>(k, 1), kInt8KAlign);
  p.row = RowPack{p.e.rows, k, p.kp, s.ta, p.e.a_zp_signed, p.e.shift};
  if (s.c > 0 && ctx.has_input(s.c)) {
    const TensorDesc& c = ctx.inputs[s.c];
    if (c.dtype != DType::kI32 || c.numel() != n || c.shape.back() != n)
      return Status::unsupported(label + ": C " + shape_str(c.shape) + ": an int32 C of one value per column only");
    p.bias_i32_slot = s.c;
  }
  if (s.bias > 0 && ctx.has_input(s.bias)) {
    if (ctx.inputs[s.bias].dtype != DType::kF32 || ctx.inputs[s.bias].numel() != n)
      return Status::unsupported(label + ": a float32 bias of one value per column only");
    p.bias_f32_slot = s.bias;
  }
  MOSAIC_RETURN_IF_ERROR(product_multipliers(ctx, s, n, &p));
  MOSAIC_RETURN_IF_ERROR(fits_cublas(ctx, p));
  if (pack) {
    const auto* codes = static_cast<const int8_t*>(b->data());
    p.weights = pack_weights(1, n, p.e.np, k, p.kp,
                             [&](int64_t, int64_t c, int64_t kk) { return codes[s.tb ? c * k + kk : kk * n + c]; });
  }
  return p;
}

/// QLinearConv and ConvInteger: x [N, C, spatial...] uint8/int8, W a constant int8
/// [M, C / group, kernel...] with zero point 0, the groups one strided batch of products.
inline Expected<Int8Plan> int8_conv_plan(const KernelContext& ctx, bool pack) {
  using namespace int8_detail;
  const std::string& label = ctx.node->label();
  const bool qlinear = ctx.node->op_type == "QLinearConv";
  const size_t w_slot = qlinear ? 3 : 1;
  MOSAIC_RETURN_IF_ERROR(no_fused_activation(ctx));
  MOSAIC_ASSIGN_OR_RETURN(ConvParams cp, quant_conv_params(ctx));
  MOSAIC_ASSIGN_OR_RETURN(Window3 win, lift_window3(cp.win, *ctx.node));
  const Tensor* w = ctx.constant(w_slot);
  if (!is_code_type(ctx.inputs[0].dtype) || !w || w->dtype() != DType::kI8)
    return Status::unsupported(label + ": the cuda backend's int8 convolution takes uint8/int8 x and constant int8 weights");
  Int8Plan p;
  p.convolution = true;
  MOSAIC_RETURN_IF_ERROR(zero_weight_zero_point(ctx, qlinear ? 5 : 3));
  MOSAIC_RETURN_IF_ERROR(activation_codes(ctx, 2, &p));
  const int64_t k = cp.c_per_group() * win.k[0] * win.k[1] * win.k[2];
  if (k > kInt8MaxK) return Status::unsupported(label + ": K = " + std::to_string(k) + " could wrap the int32 sum");
  p.e.groups = cp.group;
  p.e.spatial = win.out_size();
  p.e.rows = cp.n * p.e.spatial;
  p.e.n = cp.oc_per_group();
  p.e.np = round_up(p.e.n, kInt8NAlign);
  p.kp = round_up(std::max<int64_t>(k, 1), kInt8KAlign);
  ConvPack& c = p.conv;
  c.groups = cp.group, c.rows = p.e.rows, c.k = k, c.kp = p.kp;
  c.channels = cp.c, c.group_channels = cp.c_per_group();
  for (int a = 0; a < 3; ++a) {
    c.in[a] = win.in[a], c.out[a] = win.out[a], c.kernel[a] = win.k[a];
    c.stride[a] = win.s[a], c.dilation[a] = win.d[a], c.pad_begin[a] = win.pb[a];
  }
  c.is_signed = p.e.a_zp_signed;
  c.shift = p.e.shift;
  c.pad_code = p.e.a_zero_point;
  if (qlinear) {
    if (ctx.has_input(8)) {
      if (ctx.inputs[8].dtype != DType::kI32 || ctx.inputs[8].numel() != cp.oc)
        return Status::unsupported(label + ": an int32 bias of one value per output channel only");
      p.bias_i32_slot = 8;
    }
    const Tensor* xs = scalar_constant(ctx, 1);
    const Tensor* ys = scalar_constant(ctx, 6);
    MOSAIC_ASSIGN_OR_RETURN(std::vector<float> ws, constant_scales(ctx, 4, cp.oc, "w_scale"));
    if (!xs || !ys || xs->dtype() != DType::kF32 || ys->dtype() != DType::kF32)
      return Status::unsupported(label + ": x_scale and y_scale must be float32 constants of one value");
    p.e.per_column = ws.size() > 1;
    for (float s : ws) p.multipliers.push_back(static_cast<float>(qlinear_multiplier(xs->f32()[0], s, ys->f32()[0])));
    MOSAIC_RETURN_IF_ERROR(requantised_output(ctx, 7, DevIntOut::kQLinear, &p));
  } else {
    p.e.out = DevIntOut::kInt32;
  }
  MOSAIC_RETURN_IF_ERROR(fits_cublas(ctx, p));
  if (pack) {
    const auto* codes = static_cast<const int8_t*>(w->data());
    const int64_t ocg = p.e.n;
    p.weights = pack_weights(cp.group, ocg, p.e.np, k, p.kp,
                             [&](int64_t g, int64_t oc, int64_t kk) { return codes[(g * ocg + oc) * k + kk]; });
  }
  return p;
}

}  // namespace mosaic::cuda_backend
