// The cuda backend's com.microsoft QOperator element-wise ops (issue 52) per element, written
// once for the device and the host as device_quant.hpp is: QLinearAdd and QLinearMul
// (broadcast, a fused Relu), QLinearGlobalAveragePool, QLinearAveragePool, QLinearSoftmax and
// QLinearConcat's requantisation.
// QLinearSigmoid and QLinearLeakyRelu need no function here: their codes go through the
// oracle's own table (operators/ms_quantize.hpp's qlinear_lookup_table, built at plan time)
// on quant.cu's CodeLookup kernel. Each function is the naive oracle's arithmetic
// (backends/common/ms_quantize.cpp) step for step, every product and quotient rounded once
// (dev_mul_rn: nvcc, like -march=native, would fuse a product into the sum after it).
// qlinear_plan.hpp fills the parameters from a node; tests/test_cuda_qlinear_math.cpp runs
// these functions on the host against the oracle, code for code. No CUDA header is needed.
#pragma once

#include <math.h>

#include <cstdint>

#include "backends/cuda/device_math.hpp"   // Broadcast, broadcast_offsets
#include "backends/cuda/device_quant.hpp"  // dev_mul_rn, dev_code

namespace mosaic::cuda_backend {

/// operators/ms_quantize.hpp's quantise_result: v rounded half to even, plus the zero point,
/// saturated to [lo, hi]; NaN gives the zero point (saturated).
MOSAIC_HD int dev_quantise_result(float v, int zero_point, int lo, int hi) {
  if (v != v) return zero_point < lo ? lo : zero_point > hi ? hi : zero_point;
  const float r = rintf(v) + static_cast<float>(zero_point);
  return r <= static_cast<float>(lo) ? lo : r >= static_cast<float>(hi) ? hi : static_cast<int>(r);
}

/// QLinearAdd or QLinearMul of 8-bit codes of one type (A, B and C), broadcast.
struct DevQBinary {
  Broadcast shape;
  bool mul = false;        ///< QLinearMul: ra x (a - za)(b - zb); else QLinearAdd
  bool relu = false;       ///< a Relu fused before the quantisation: max with C's zero point
  bool is_signed = false;  ///< int8 codes, else uint8
  float ra = 1.f, rb = 1.f;  ///< Add: A's and B's scales over C's; Mul: ra = A's x B's over C's
  int za = 0, zb = 0, zc = 0, lo = 0, hi = 255;
};

/// Output element i: for Add, qlinear_add_value (each scaled difference rounded, then their
/// sum); for Mul, the ratio times the integer product; then C's quantisation.
MOSAIC_HD int dev_qbinary_at(const DevQBinary& q, const uint8_t* a, const uint8_t* b, int64_t i) {
  int64_t ia = 0, ib = 0;
  broadcast_offsets(q.shape, i, &ia, &ib);
  const int da = dev_code(a[ia], q.is_signed) - q.za, db = dev_code(b[ib], q.is_signed) - q.zb;
  const float v = q.mul ? dev_mul_rn(q.ra, static_cast<float>(da * db))
                        : dev_add_rn(dev_mul_rn(q.ra, static_cast<float>(da)), dev_mul_rn(q.rb, static_cast<float>(db)));
  const int r = dev_quantise_result(v, q.zc, q.lo, q.hi);
  return q.relu && r < q.zc ? q.zc : r;  // Q(relu(v)) = max(Q(v), Q(0))
}

/// QLinearGlobalAveragePool of [N, C, spatial...] codes, or [N, spatial..., C] (channels_last).
struct DevQGlobalPool {
  int64_t channels = 1, spatial = 1;
  bool channels_last = false, is_signed = false;
  int zx = 0, zy = 0, lo = 0, hi = 255;
  float scale = 1.f;  ///< x_scale / (y_scale x spatial), formed as the oracle forms it
};

/// Output o (image o / channels, channel o % channels): the integer sum less the zero points,
/// times the scale in float32, quantised.
MOSAIC_HD int dev_qglobal_pool_at(const DevQGlobalPool& p, const uint8_t* x, int64_t o) {
  const int64_t n = o / p.channels, c = o % p.channels;
  int64_t sum = 0;
  for (int64_t s = 0; s < p.spatial; ++s)
    sum += dev_code(x[p.channels_last ? (n * p.spatial + s) * p.channels + c : o * p.spatial + s], p.is_signed);
  sum -= p.spatial * p.zx;
  return dev_quantise_result(dev_mul_rn(static_cast<float>(sum), p.scale), p.zy, p.lo, p.hi);
}

/// One operand of a QLinearConcat: its codes as [outer][run] (run: its extent along the axis
/// times the dimensions after it), written at column `start` of the output's [outer][out_run],
/// copied where its scale and zero point are Y's, else requantised to Y's.
struct DevQRequant {
  int64_t run = 1, out_run = 1, start = 0;
  bool copy = true, is_signed = false;
  float x_scale = 1.f, y_scale = 1.f;
  int zx = 0, zy = 0, lo = 0, hi = 255;
};

/// Operand element i into y: (x - zx) x x_scale, over y_scale (each rounded), quantised.
MOSAIC_HD void dev_qconcat_at(const DevQRequant& r, const uint8_t* x, uint8_t* y, int64_t i) {
  const int64_t o = i / r.run, e = i % r.run;
  uint8_t out = x[i];
  if (!r.copy) {
    const float v = dev_div_rn(dev_mul_rn(static_cast<float>(dev_code(x[i], r.is_signed) - r.zx), r.x_scale), r.y_scale);
    out = static_cast<uint8_t>(dev_quantise_result(v, r.zy, r.lo, r.hi));  // int8's bits as a byte
  }
  y[o * r.out_run + r.start + e] = out;
}

/// QLinearAveragePool of NCHW codes, its window lifted to 3 spatial axes (operators/params.hpp's
/// Window3: the leading ones of size 1).
struct DevQAvgPool {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1};
  int64_t pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
  bool count_include_pad = false, is_signed = false;
  float x_scale = 1.f, y_scale = 1.f;
  int zx = 0, zy = 0, lo = 0, hi = 255;
};

/// Output o (plane o / the output's positions): the window's cells inside the input, each
/// dequantised and rounded, summed in float32 in Window3::each_cell's order; over their count,
/// or with count_include_pad over the cells inside input + padding (Window3::padded_cells);
/// over y's scale, quantised.
MOSAIC_HD int dev_qavg_pool_at(const DevQAvgPool& p, const uint8_t* x, int64_t o) {
  const int64_t out_sp = p.out[0] * p.out[1] * p.out[2], pos = o % out_sp;
  const int64_t at[3] = {pos / (p.out[1] * p.out[2]), pos / p.out[2] % p.out[1], pos % p.out[2]};
  const uint8_t* plane = x + (o / out_sp) * p.in[0] * p.in[1] * p.in[2];
  float sum = 0.f;
  int64_t cells = 0;
  for (int64_t a = 0; a < p.k[0]; ++a) {
    const int64_t i0 = at[0] * p.s[0] - p.pb[0] + a * p.d[0];
    if (i0 < 0 || i0 >= p.in[0]) continue;
    for (int64_t b = 0; b < p.k[1]; ++b) {
      const int64_t i1 = at[1] * p.s[1] - p.pb[1] + b * p.d[1];
      if (i1 < 0 || i1 >= p.in[1]) continue;
      for (int64_t c = 0; c < p.k[2]; ++c) {
        const int64_t i2 = at[2] * p.s[2] - p.pb[2] + c * p.d[2];
        if (i2 < 0 || i2 >= p.in[2]) continue;
        const int code = dev_code(plane[(i0 * p.in[1] + i1) * p.in[2] + i2], p.is_signed);
        sum = dev_add_rn(sum, dev_mul_rn(static_cast<float>(code - p.zx), p.x_scale));
        ++cells;
      }
    }
  }
  if (p.count_include_pad) {
    cells = 1;
    for (int a = 0; a < 3; ++a) {
      const int64_t start = at[a] * p.s[a] - p.pb[a], reach = start + (p.k[a] - 1) * p.d[a] + 1;
      const int64_t end = reach < p.in[a] + p.pe[a] ? reach : p.in[a] + p.pe[a];
      cells *= (end - start + p.d[a] - 1) / p.d[a];
    }
  }
  const float mean = cells > 0 ? dev_div_rn(sum, static_cast<float>(cells)) : 0.f;
  return dev_quantise_result(dev_div_rn(mean, p.y_scale), p.zy, p.lo, p.hi);
}

/// QLinearSoftmax of codes as [outer, len, inner] (operators/ms_quantize.hpp's SoftmaxRows).
struct DevQSoftmax {
  int64_t len = 1, inner = 1;
  bool is_signed = false;
  float x_scale = 1.f, y_scale = 1.f;
  int zy = 0, lo = 0, hi = 255;
};

/// exp of a code less the row's greatest, dequantised (the float32 product rounded), in double.
MOSAIC_HD double dev_softmax_exp(const DevQSoftmax& p, uint8_t byte, int top) {
  return exp(static_cast<double>(dev_mul_rn(static_cast<float>(dev_code(byte, p.is_signed) - top), p.x_scale)));
}

/// Row r (outer r / inner, inner r % inner), its len outputs: exp of each code less the row's
/// greatest, dequantised (the zero point cancels), in double; their sum in double in order;
/// each exp over the sum rounded to float32, over y's scale, quantised. The oracle's exp is the
/// host's libm and this one the device's (each within an ulp of the true value): a code could
/// differ only where a double's last bit decides a float32 rounding.
MOSAIC_HD void dev_qsoftmax_row(const DevQSoftmax& p, const uint8_t* x, uint8_t* y, int64_t r) {
  const int64_t first = (r / p.inner) * p.len * p.inner + r % p.inner;
  int top = p.lo;
  for (int64_t k = 0; k < p.len; ++k) {
    const int v = dev_code(x[first + k * p.inner], p.is_signed);
    top = v > top ? v : top;
  }
  double sum = 0;
  for (int64_t k = 0; k < p.len; ++k) sum += dev_softmax_exp(p, x[first + k * p.inner], top);
  for (int64_t k = 0; k < p.len; ++k) {
    const float share = static_cast<float>(dev_softmax_exp(p, x[first + k * p.inner], top) / sum);
    y[first + k * p.inner] = static_cast<uint8_t>(dev_quantise_result(dev_div_rn(share, p.y_scale), p.zy, p.lo, p.hi));
  }
}

}  // namespace mosaic::cuda_backend
