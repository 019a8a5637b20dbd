// The cuda backend's integer arithmetic (issue 52), written once for the device and the host
// as device_math.hpp is: QuantizeLinear and DequantizeLinear of one element, the packing of
// 8-bit operands for cuBLAS's int8 product, and the epilogue that turns its int32 sums into
// ONNX's outputs. The kernels (quant.cu) call these for every element; tests/test_cuda_math.cpp
// runs the same functions on the host, with a plain int64 product standing in for cuBLAS,
// against the naive oracle's outputs, so the formulas and the indexing are checked on every
// machine, GPU or not. No CUDA header is needed to include it.
//
// The integer products (QLinearConv, ConvInteger, QLinearMatMul, MatMulInteger, QGemm,
// MatMulIntegerToFloat) run as one int8 x int8 -> int32 product on cuBLAS, both operands K
// contiguous ("TN", the form cuBLAS's integer tensor-core kernels take), K padded with zeros
// to a multiple of 16 and the weight columns to a multiple of 4:
//   - A (the activations, uint8 or int8 codes) is packed as A' = a - shift, shift 128 for
//     uint8 and 0 for int8, so that A' fits int8; a convolution's columns are gathered
//     (im2col) with the padding holding the zero point's code;
//   - W (constant int8 weights, zero point 0) is packed once at plan time, transposed to
//     [groups][columns][K], with each column's sum;
//   - sum_k (a - a_zp) w = sum_k A' w + (shift - a_zp) sum_k w, exactly, and the padded
//     positions add 0 to both sides; then ONNX's bias, the wrap to int32, and the output's
//     own rounding (naive's, step for step).
#pragma once

#include <math.h>

#include <cstdint>
#include <vector>

#include "backends/cuda/device_math.hpp"  // MOSAIC_HD

namespace mosaic::cuda_backend {

/// Products and quotients rounded once each, never fused into a multiply-add (the host's
/// -march=native and nvcc would both contract a * b + c): the naive oracle rounds each. The
/// device's round-to-nearest intrinsics; on the host, each result stored through a volatile.
#if defined(__CUDA_ARCH__)
MOSAIC_HD float dev_mul_rn(float a, float b) { return __fmul_rn(a, b); }
MOSAIC_HD float dev_add_rn(float a, float b) { return __fadd_rn(a, b); }
MOSAIC_HD float dev_div_rn(float a, float b) { return __fdiv_rn(a, b); }
MOSAIC_HD double dev_dmul_rn(double a, double b) { return __dmul_rn(a, b); }
#else
template <class T>
MOSAIC_HD T dev_stored(T v) {
  volatile T r = v;
  return r;
}
MOSAIC_HD float dev_mul_rn(float a, float b) { return dev_stored(a * b); }
MOSAIC_HD float dev_add_rn(float a, float b) { return dev_stored(a + b); }
MOSAIC_HD float dev_div_rn(float a, float b) { return dev_stored(a / b); }
MOSAIC_HD double dev_dmul_rn(double a, double b) { return dev_stored(a * b); }
#endif

/// An 8-bit code as stored (one byte) read as its integer: uint8 0..255 or int8 -128..127.
MOSAIC_HD int dev_code(uint8_t byte, bool is_signed) {
  return is_signed ? static_cast<int>(static_cast<int8_t>(byte)) : static_cast<int>(byte);
}

/// QuantizeLinear of one float32 value into [lo, hi]: x / scale in float32, rounded half to
/// even, plus the zero point, saturated; NaN gives the zero point (naive's quantize_bytes).
MOSAIC_HD int dev_quantize(float x, float scale, int zero_point, int lo, int hi) {
  const float q = dev_div_rn(x, scale);
  if (q != q) return zero_point;
  const float r = rintf(q) + static_cast<float>(zero_point);
  return r <= static_cast<float>(lo) ? lo : r >= static_cast<float>(hi) ? hi : static_cast<int>(r);
}

/// DequantizeLinear of one code: (code - zero point) * scale, rounded once.
MOSAIC_HD float dev_dequantize(int code, float scale, int zero_point) {
  return dev_mul_rn(static_cast<float>(code - zero_point), scale);
}

/// The scale (and zero point) of element i of a tensor quantised per tensor (axis_dim 1) or
/// per axis: x as [outer, axis_dim, inner].
MOSAIC_HD int64_t dev_scale_index(int64_t i, int64_t axis_dim, int64_t inner) {
  return axis_dim == 1 ? 0 : i / inner % axis_dim;
}

/// DynamicQuantizeLinear's scale and zero point from the range [lo, hi] of its input and 0,
/// in float32 as ONNX specifies (naive's DynamicQuantizeLinearKernel): uint8 codes.
MOSAIC_HD void dev_dynamic_params(float lo, float hi, float* scale, int* zero_point) {
  const float s = dev_div_rn(hi == lo ? 1.0f : dev_add_rn(hi, -lo), 255.0f);
  const float z = fminf(255.0f, fmaxf(0.0f, 0.0f - dev_div_rn(lo, s)));
  *scale = s;
  *zero_point = static_cast<int>(rintf(z));
}

/// How a product's int32 sums become its output.
enum class DevIntOut : int {
  kInt32,    ///< MatMulInteger, ConvInteger: the sum itself
  kQLinear,  ///< QLinearMatMul, QLinearConv: sum x multiplier in double, rounded, + y's zero point
  kQGemm,    ///< QGemm with y_scale: sum x multiplier in float32, rounded, + y's zero point
  kFloat,    ///< QGemm without y_scale, MatMulIntegerToFloat: sum x multiplier in float32 (+ bias)
};

/// The geometry and the constants of one integer product's epilogue. The int32 sums C are
/// [groups][rows][np] (np: the columns per group, n, padded); a convolution's rows are
/// (image, output position) and its output NCHW, a matrix product's output [rows, n].
struct IntEpilogue {
  DevIntOut out = DevIntOut::kInt32;
  int64_t rows = 0, n = 0, np = 0, groups = 1;
  int64_t spatial = 0;      ///< a convolution's output positions per image; 0: a matrix product
  int shift = 0;            ///< what packing took from A's codes: 128 (uint8) or 0 (int8)
  int a_zero_point = 0;     ///< A's zero point, where it is a constant
  bool a_zp_signed = false; ///< the type of a zero point read on the device
  bool per_column = false;  ///< one multiplier per output column (channel), else one
  int y_zero_point = 0, lo = 0, hi = 255;
  bool y_signed = false;    ///< kQLinear, kQGemm: int8 output, else uint8
};

/// Output element i of the product: where its sum sits in C and its column (channel) among
/// all groups' columns.
MOSAIC_HD void dev_product_source(const IntEpilogue& e, int64_t i, int64_t* c_at, int64_t* column) {
  const int64_t columns = e.groups * e.n;
  int64_t r = 0, ch = 0;
  if (e.spatial == 0) {
    r = i / columns;
    ch = i % columns;
  } else {
    const int64_t image = i / (columns * e.spatial), rest = i % (columns * e.spatial);
    ch = rest / e.spatial;
    r = image * e.spatial + rest % e.spatial;
  }
  *column = ch;
  *c_at = ((ch / e.n) * e.rows + r) * e.np + ch % e.n;
}

/// The exact sum of (a - a_zp) w over K plus the int32 bias, wrapped to int32 as ONNX's
/// accumulator: cuBLAS's sum of the packed codes, corrected by (shift - a_zp) times the
/// column's weight sum.
MOSAIC_HD int32_t dev_exact_sum(int32_t packed_sum, int zp_term, int32_t weight_sum, int32_t bias) {
  const int64_t total = static_cast<int64_t>(packed_sum) + static_cast<int64_t>(zp_term) * weight_sum + bias;
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(total)));
}

/// kQLinear: acc x multiplier in double (the multiplier the float32 a_scale * w_scale / y_scale
/// of ONNX's reference), rounded half to even, + zero point, saturated; NaN gives the zero point.
MOSAIC_HD int dev_requantize_double(int32_t acc, float multiplier, int zero_point, int lo, int hi) {
  const double r = dev_dmul_rn(static_cast<double>(acc), static_cast<double>(multiplier));
  if (r != r) return zero_point;
  const double v = rint(r) + zero_point;
  return v <= lo ? lo : v >= hi ? hi : static_cast<int>(v);
}

/// kQGemm: the same in float32 (com.microsoft's QGemm); NaN gives the zero point, saturated.
MOSAIC_HD int dev_requantize_float(int32_t acc, float multiplier, int zero_point, int lo, int hi) {
  const float v = dev_mul_rn(static_cast<float>(acc), multiplier);
  if (v != v) return zero_point < lo ? lo : zero_point > hi ? hi : zero_point;
  const float r = rintf(v) + static_cast<float>(zero_point);
  return r <= static_cast<float>(lo) ? lo : r >= static_cast<float>(hi) ? hi : static_cast<int>(r);
}

/// The run's inputs of one epilogue, device pointers (host ones in the tests): C, the
/// weights' column sums, the multipliers (one, or one per column), and where present the
/// int32 bias per column (QLinearConv's B, QGemm's C), the float32 bias per column
/// (MatMulIntegerToFloat's), A's scale (MatMulIntegerToFloat's, read at run time: the
/// multiplier is then a_scale x the column's b_scale) and A's zero point at run time.
struct IntEpilogueArgs {
  const int32_t* c = nullptr;
  const int32_t* weight_sums = nullptr;
  const float* multipliers = nullptr;
  const int32_t* bias_i32 = nullptr;
  const float* bias_f32 = nullptr;
  const float* a_scale = nullptr;
  const uint8_t* a_zero_point = nullptr;
  void* y = nullptr;
};

/// Output element i: its sum from C, corrected and biased, then the output's own rounding,
/// stored in y's type (uint8/int8, int32 or float32).
MOSAIC_HD void dev_epilogue_at(const IntEpilogue& e, const IntEpilogueArgs& a, int64_t i) {
  int64_t at = 0, col = 0;
  dev_product_source(e, i, &at, &col);
  const int a_zp = a.a_zero_point ? dev_code(a.a_zero_point[0], e.a_zp_signed) : e.a_zero_point;
  const int32_t acc =
      dev_exact_sum(a.c[at], e.shift - a_zp, a.weight_sums[col], a.bias_i32 ? a.bias_i32[col] : 0);
  const float m = a.multipliers ? a.multipliers[e.per_column ? col : 0] : 1.f;
  switch (e.out) {
    case DevIntOut::kInt32: static_cast<int32_t*>(a.y)[i] = acc; return;
    case DevIntOut::kQLinear:
    case DevIntOut::kQGemm: {
      const int q = e.out == DevIntOut::kQLinear ? dev_requantize_double(acc, m, e.y_zero_point, e.lo, e.hi)
                                                 : dev_requantize_float(acc, m, e.y_zero_point, e.lo, e.hi);
      if (e.y_signed) static_cast<int8_t*>(a.y)[i] = static_cast<int8_t>(q);
      else static_cast<uint8_t*>(a.y)[i] = static_cast<uint8_t>(q);
      return;
    }
    case DevIntOut::kFloat: {
      const float mult = a.a_scale ? dev_mul_rn(a.a_scale[0], m) : m;
      float v = dev_mul_rn(static_cast<float>(acc), mult);
      if (a.bias_f32) v = dev_add_rn(v, a.bias_f32[col]);
      static_cast<float*>(a.y)[i] = v;
      return;
    }
  }
}

/// A matrix product's A packed for cuBLAS: [rows][kp] int8, A' = a - shift, zeros past K.
/// A is [rows, k] row-major, or [k, rows] where `transposed` (QGemm's transA).
struct RowPack {
  int64_t rows = 0, k = 0, kp = 0;
  bool transposed = false, is_signed = false;
  int shift = 0;
};

/// Element idx (< rows * kp) of the packed A.
MOSAIC_HD int8_t dev_row_pack_at(const RowPack& p, const uint8_t* a, int64_t idx) {
  const int64_t r = idx / p.kp, k = idx % p.kp;
  if (k >= p.k) return 0;
  const uint8_t byte = p.transposed ? a[k * p.rows + r] : a[r * p.k + k];
  return static_cast<int8_t>(dev_code(byte, p.is_signed) - p.shift);
}

/// A convolution's input gathered into columns (im2col) for cuBLAS: [groups][rows][kp] int8,
/// rows (image, output position), K (input channel of the group, kernel tap), each the input
/// code - shift, the padding the zero point's code - shift (a real zero), zeros past K. Up to
/// three spatial axes (a 1-D or 2-D convolution has the rest of size 1).
struct ConvPack {
  int64_t groups = 1, rows = 0, k = 0, kp = 0;
  int64_t channels = 0, group_channels = 0;  ///< the input's channels, and per group
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1}, pad_begin[3] = {0, 0, 0};
  bool is_signed = false;
  int shift = 0;
  int pad_code = 0;  ///< the zero point (a constant)
};

/// Element idx (< groups * rows * kp) of the gathered columns; `zero_point`: the input's zero
/// point on the device where it is a run's value (nullptr: ConvPack::pad_code).
MOSAIC_HD int8_t dev_conv_pack_at(const ConvPack& p, const uint8_t* x, const uint8_t* zero_point, int64_t idx) {
  const int64_t k = idx % p.kp, gr = idx / p.kp, r = gr % p.rows, g = gr / p.rows;
  if (k >= p.k) return 0;
  const int64_t taps = p.kernel[0] * p.kernel[1] * p.kernel[2];
  const int64_t ic = k / taps, tap = k % taps;
  const int64_t t0 = tap / (p.kernel[1] * p.kernel[2]), t1 = tap / p.kernel[2] % p.kernel[1], t2 = tap % p.kernel[2];
  const int64_t out_sp = p.out[0] * p.out[1] * p.out[2];
  const int64_t image = r / out_sp, pos = r % out_sp;
  const int64_t o0 = pos / (p.out[1] * p.out[2]), o1 = pos / p.out[2] % p.out[1], o2 = pos % p.out[2];
  const int64_t i0 = o0 * p.stride[0] - p.pad_begin[0] + t0 * p.dilation[0];
  const int64_t i1 = o1 * p.stride[1] - p.pad_begin[1] + t1 * p.dilation[1];
  const int64_t i2 = o2 * p.stride[2] - p.pad_begin[2] + t2 * p.dilation[2];
  int code = zero_point ? dev_code(zero_point[0], p.is_signed) : p.pad_code;
  if (i0 >= 0 && i0 < p.in[0] && i1 >= 0 && i1 < p.in[1] && i2 >= 0 && i2 < p.in[2]) {
    const int64_t channel = image * p.channels + g * p.group_channels + ic;
    code = dev_code(x[((channel * p.in[0] + i0) * p.in[1] + i1) * p.in[2] + i2], p.is_signed);
  }
  return static_cast<int8_t>(code - p.shift);
}

/// The constant weights packed once, on the host: int8 W as [groups][np][kp] (each output
/// column's K values contiguous, zeros in the padding) and each column's sum over K.
struct PackedWeights {
  std::vector<int8_t> codes;
  std::vector<int32_t> sums;
};

/// `w_at(g, c, k)`: the weight of group g's output column c at position k < k_total.
template <class WeightAt>
PackedWeights pack_weights(int64_t groups, int64_t n, int64_t np, int64_t k_total, int64_t kp, WeightAt w_at) {
  PackedWeights p;
  p.codes.assign(static_cast<size_t>(groups * np * kp), 0);
  p.sums.assign(static_cast<size_t>(groups * n), 0);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < n; ++c) {
      int32_t sum = 0;
      for (int64_t k = 0; k < k_total; ++k) {
        const int8_t w = w_at(g, c, k);
        p.codes[static_cast<size_t>((g * np + c) * kp + k)] = w;
        sum += w;
      }
      p.sums[static_cast<size_t>(g * n + c)] = sum;
    }
  return p;
}

/// x rounded up to a multiple of m.
inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace mosaic::cuda_backend
