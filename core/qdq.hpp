// Post-training quantisation's graph rewrite (`mosaic quantize`, docs/quantization.md): a
// float model's products (Conv, MatMul, Gemm by default) read their weights as int8
// initializers through DequantizeLinear, their biases as int32 ones, and their float
// activations, inputs and outputs, through QuantizeLinear -> DequantizeLinear pairs. This is
// the standard QDQ form that ONNX Runtime, OpenVINO and TensorRT read and fuse into integer
// kernels; Mosaic's own backends run it as written.
//
// Weights are symmetric (zero point 0, codes in [-127, 127], or [-63, 63] with
// reduce_range), one scale per output channel (Conv: axis 0; MatMul and Gemm: B's output
// column) or one per tensor. Activations are asymmetric uint8 (the default) or int8, or
// symmetric int8, with one scale per tensor from the calibrated range (metrics/calibration.hpp).
// A bias is quantised with the scale x_scale * w_scale[c] and zero point 0, as ONNX Runtime's
// integer kernels expect; where that scale would overflow int32 it stays float.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.hpp"
#include "ir/status.hpp"

namespace mosaic {

struct QdqOptions {
  std::vector<std::string> op_types = {"Conv", "MatMul", "Gemm"};  ///< ONNX ops whose inputs and outputs are quantised
  std::vector<std::string> exclude;  ///< node names left in float (an unknown name is an error)
  bool per_channel = true;           ///< weights: one scale per output channel (needs opset 13)
  DType activation_type = DType::kU8;  ///< kU8 or kI8
  bool symmetric_activations = false;  ///< zero point 0 (int8 only)
  bool reduce_range = false;           ///< weights in 7 bits, for integer kernels that saturate in int16
};

/// What a rewrite quantises, chosen from the graph before calibration.
struct QdqTargets {
  /// Float values to calibrate and quantise, in graph order: the activations the quantised
  /// nodes read and write (graph inputs included, graph outputs excluded: they stay float).
  std::vector<std::string> activations;
  std::vector<std::string> nodes;    ///< the quantised nodes, by name
  std::vector<std::string> skipped;  ///< nodes of the op types left in float, with why
};

/// The targets of `g` (as loaded) under `o`; `descs` gives every value's element type (the
/// value_descs of a prepared copy). Errors: an excluded name no node has, an op type that is
/// not an ONNX op, an opset below 10 (13 with per-channel weights), control flow.
Expected<QdqTargets> qdq_targets(const Graph& g, const std::map<std::string, TensorDesc>& descs, const QdqOptions& o);

/// An activation's scale and zero point from its calibrated range [lo, hi] (widened to hold 0).
struct QuantParams {
  float scale = 1.f;
  int32_t zero_point = 0;
};
QuantParams activation_params(float lo, float hi, DType type, bool symmetric);

/// What apply_qdq did, beyond the targets.
struct QdqRewrite {
  int weights = 0;  ///< weight initializers quantised to int8
  int biases = 0;   ///< biases quantised to int32
  std::vector<std::string> notes;  ///< biases kept float, and why
};

/// Rewrites `g` (as loaded; symbolic dimensions stay) into its QDQ form: every target
/// activation through a QuantizeLinear -> DequantizeLinear pair with the scale and zero point
/// of its range in `ranges` (by name; each target must have one), every quantised node's
/// float weights and biases as integer initializers through DequantizeLinear. New names are
/// the old ones with _quantized, _dequantized, _scale and _zero_point appended (made unique).
Expected<QdqRewrite> apply_qdq(Graph& g, const QdqTargets& targets,
                               const std::map<std::string, std::pair<float, float>>& ranges, const QdqOptions& o);

}  // namespace mosaic
