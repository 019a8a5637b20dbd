// The quantised operators of the com.microsoft domain that ONNX Runtime's quantiser writes in
// its QOperator form (docs/conformance.md, "Quantised models"): QLinearAdd, QLinearMul,
// QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, QLinearGlobalAveragePool,
// QLinearAveragePool, QLinearConcat and QGemm; MatMulIntegerToFloat, its fusion of a dynamically
// quantised MatMulInteger -> Cast -> Mul [-> Add]; MatMulNBits, the block-quantised weights of
// today's LLM exports (2, 4 or 8 bits); and the domain's QuantizeLinear and
// DequantizeLinear (ONNX's, with 16-bit and 4-bit types at any opset). Their keys are
// "com.microsoft.QLinearAdd" and so on (ir/graph.hpp, op_key): an ONNX-domain node of the same
// name never reaches them.
//
// Semantics are ONNX Runtime's documented ones (its ContribOperators.md): each op is
// dequantize -> the float op -> quantize, with per-tensor scales and zero points (QGemm's B
// per column too). The naive oracle computes them in float32 in the order ONNX Runtime's
// kernels do, and rounds half to even once (backends/common/ms_quantize.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>

#include "ir/status.hpp"
#include "operators/op_context.hpp"
#include "operators/params.hpp"

namespace mosaic {

struct OpSchema;

/// The domain of ONNX Runtime's contributed operators.
inline constexpr const char* kMicrosoftDomain = "com.microsoft";

/// Where each operand of an integer matrix product sits among its node's inputs, for the
/// four that share one kernel on the int8 backends: ONNX's MatMulInteger (int32 out) and
/// QLinearMatMul (requantised), and this domain's MatMulIntegerToFloat (float32 out, a float
/// bias) and QGemm (A or B transposed, an int32 C, alpha; requantised with y_scale, float32
/// without). 0: absent (every op has A at 0).
struct IntegerProductSlots {
  bool to_float = false;   ///< MatMulIntegerToFloat, QGemm without y_scale
  bool requantise = false; ///< QLinearMatMul, QGemm with y_scale
  bool gemm = false;       ///< QGemm: transA, transB, alpha and an int32 C
  bool ta = false, tb = false;
  float alpha = 1.f;
  /// bias: a float32 one added after the scales; c: QGemm's int32 one added before them.
  size_t b = 1, a_zp = 2, b_zp = 3, a_scale = 0, b_scale = 0, bias = 0, c = 0, y_scale = 0, y_zp = 0;
};
IntegerProductSlots integer_product_slots(const Node& n);

/// QLinearConcat's operands: input 3k + 2 is tensor k, 3k + 3 its scale, 3k + 4 its zero point.
inline size_t qlinear_concat_tensors(const OpContext& ctx) { return (ctx.inputs.size() - 2) / 3; }

/// (code - zero point) * scale rounded once to float32, as a product no compiler fuses with the
/// addition that follows it: -march=native contracts a plain `d * s + t` into one multiply-add
/// on machines with FMA (one rounding instead of two), and the codes quantised from such sums
/// then differ with the build at ties. A difference (|d| < 2^24) times a float is exact in
/// double, so the conversion is the product's one rounding on every machine.
template <class Int>
float scaled_difference(Int d, float scale) {
  return static_cast<float>(static_cast<double>(d) * static_cast<double>(scale));
}

/// QLinearAdd's value before its rounding: each operand's difference from its zero point times
/// its scale over C's, each product rounded to float32, then their float32 sum (the order of
/// ONNX Runtime's scalar kernel; never one multiply-add, as above). The naive oracle, the host
/// backends' vector loop and the cuda kernel all compute this.
template <class Int>
float qlinear_add_value(float ra, Int da, float rb, Int db) {
  return scaled_difference(da, ra) + scaled_difference(db, rb);
}

/// How each op of this domain quantises its float32 result: rounded half to even, plus the
/// zero point, saturated to [lo, hi]; NaN gives the zero point (saturated).
inline int64_t quantise_result(float v, int64_t zero_point, int64_t lo, int64_t hi) {
  if (std::isnan(v)) return std::clamp(zero_point, lo, hi);
  const float r = std::nearbyint(v) + static_cast<float>(zero_point);
  if (r <= static_cast<float>(lo)) return lo;
  if (r >= static_cast<float>(hi)) return hi;
  return static_cast<int64_t>(r);
}

/// QLinearSigmoid's and QLinearLeakyRelu's results for every code q in [lo, hi] (table[q -
/// lo]), as ONNX Runtime computes them: the function of the dequantised value (q - x_zp) *
/// x_scale, over y_scale, quantised. The naive oracle and the cuda backend look codes up in it.
inline void qlinear_lookup_table(bool sigmoid, float alpha, float x_scale, int64_t x_zp, float y_scale, int64_t y_zp,
                                 int64_t lo, int64_t hi, int64_t* table) {
  for (int64_t q = lo; q <= hi; ++q) {
    const float x = static_cast<float>(q - x_zp) * x_scale;
    const float f = sigmoid ? 1.f / (1.f + std::exp(-x)) : (x >= 0.f ? x : alpha * x);
    table[q - lo] = quantise_result(f / y_scale, y_zp, lo, hi);
  }
}

/// A scale of zero, a negative one or a non-finite one has no quantised meaning: refused by
/// name (`what`) instead of dividing by it. Shape inference checks constant scales with it,
/// the kernels the scales a run is given.
Status check_quant_scale(const Node& node, float scale, const std::string& what);

/// QLinearSoftmax's rows: X as [outer, len, inner], the softmax over len: `axis` alone from
/// opset 13 (the node's `opset` attribute), every axis from `axis` on before it (the Softmax of
/// opset < 13).
struct SoftmaxRows {
  int64_t outer = 1, len = 1, inner = 1;
};
Expected<SoftmaxRows> qlinear_softmax_rows(const OpContext& ctx);

/// QLinearAveragePool's window geometry: AveragePool's, of X alone.
Expected<PoolParams> qlinear_pool_params(const OpContext& ctx);

/// MatMulNBits' geometry (attributes K, N, bits, block_size), checked: B is [N, blocks,
/// block_size * bits / 8] bytes, low bits first within each byte.
struct MatMulNBitsParams {
  int64_t k = 0, n = 0, bits = 4, block_size = 32, blocks = 0;
  /// Bytes per row of packed zero points: blocks * bits / 8 rounded up.
  int64_t zero_point_row_bytes() const { return blocks / 8 * bits + (blocks % 8 * bits + 7) / 8; }  // no overflow
};
Expected<MatMulNBitsParams> matmul_nbits_params(const OpContext& ctx);

void add_ms_quantize_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
