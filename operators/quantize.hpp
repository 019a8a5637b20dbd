// ONNX's quantisation operators: QuantizeLinear and DequantizeLinear (per tensor, per axis
// and blocked, every quantised type from int2 to int16 and the 4- and 8-bit floats),
// DynamicQuantizeLinear, and the integer products MatMulInteger, ConvInteger,
// QLinearMatMul and QLinearConv. The naive oracle is their exact reference: integers
// accumulate exactly (int64, wrapped to int32 where ONNX's output is int32), round half to
// even, saturate to the output type's range (backends/common/quantize.cpp).
#pragma once

#include <map>
#include <string>

#include "ir/status.hpp"
#include "operators/op_context.hpp"
#include "operators/params.hpp"

namespace mosaic {

struct OpSchema;

/// Where a scale (and zero point) applies: one for the tensor, one per index of `axis`, or
/// one per block of `block` consecutive indices along it.
struct QuantScaleLayout {
  enum Kind { kTensor, kAxis, kBlock } kind = kTensor;
  int64_t outer = 1, axis_dim = 1, inner = 1;  ///< x as [outer, axis_dim, inner]
  int64_t block = 0, blocks = 1;               ///< kBlock: block size and ceil(axis_dim / block)
  /// The scale element that applies to x's element (o, a, i).
  int64_t index(int64_t o, int64_t a, int64_t i) const {
    if (kind == kTensor) return 0;
    if (kind == kAxis) return a;
    return (o * blocks + a / block) * inner + i;
  }
};

/// QuantizeLinear's and DequantizeLinear's geometry and types, checked.
struct QuantLinearParams {
  QuantScaleLayout layout;
  DType out = DType::kU8;
  bool has_zero_point = false;
  bool saturate = true;             ///< the 8-bit floats' (QuantizeLinear)
  DType divide_in = DType::kF32;    ///< QuantizeLinear: x / scale is rounded to this type
};
Expected<QuantLinearParams> quant_linear_params(const OpContext& ctx);

/// The integer range of a quantised integer type ([-8, 7] for int4); false for the floats.
bool quant_int_range(DType d, int64_t* lo, int64_t* hi);

/// ConvInteger and QLinearConv: the convolution geometry of (x, w, bias) wherever the op
/// keeps them among its inputs.
Expected<ConvParams> quant_conv_params(const OpContext& ctx);

/// Mosaic's own op for a QDQ model's float stretch between a DequantizeLinear and a
/// QuantizeLinear that maps each value alone (ReLU, Clip, a requantisation): Y = Table[X],
/// X's 8-bit codes indexing a constant table of the 256 results (X - the type's least code),
/// Y the table's type. A graph has it only after the fusion pass (core/fuse_qdq_codes.cpp).
inline constexpr const char* kCodeLookupOp = "CodeLookup";
inline constexpr const char* kCodeLookupDomain = "mosaic";

void add_quantize_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
