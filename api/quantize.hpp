// Post-training quantisation (`mosaic quantize`, docs/quantization.md): calibrate a float
// model on a data set, write its standard QDQ form (core/qdq.hpp), and measure what the
// int8 model costs in accuracy beside the float one: test accuracy of both, their top-1
// agreement, and each node's signal-to-quantisation-noise ratio, naming the first node whose
// error grows past a threshold.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/models.hpp"
#include "api/util.hpp"
#include "backends/registry.hpp"
#include "ir/status.hpp"

namespace mosaic::api {

struct QuantizeOptions {
  std::string model;   ///< ONNX file, or zoo:NAME
  std::string output;  ///< the QDQ model to write; "" writes none (the report only)
  /// Calibration (its training split) and evaluation (its test split) data, as train takes
  /// it (data_forms()); "": random inputs from common.seed, one batch per 64 samples.
  std::string data;
  std::string normalize = "none";  ///< as train's: none, auto, or MEAN[,MEAN..]:STD[,STD..]
  std::string method = "minmax";   ///< minmax, percentile or entropy (metrics/calibration.hpp)
  double percentile = 99.999;      ///< percentile's p: (100 - p) / 2 % clipped at each end
  int64_t samples = 512;           ///< calibration rows (images; batches of random inputs count their rows)
  bool per_channel = true;         ///< weights: a scale per output channel, else per tensor
  std::string activation_type = "uint8";  ///< uint8 or int8
  bool symmetric_activations = false;     ///< int8 activations with zero point 0
  bool reduce_range = false;              ///< 7-bit weights
  std::vector<std::string> op_types = {"Conv", "MatMul", "Gemm"};
  std::vector<std::string> exclude;  ///< node names left float
  bool evaluate = true;              ///< with labelled image data: both models' test accuracy
  int64_t eval_samples = 0;          ///< test rows evaluated (0: the whole test split)
  double sqnr_threshold = 20;        ///< dB; the first node below it is named
  std::string backend = default_backend();  ///< where calibration and evaluation run
  CommonOptions common;  ///< batch (0: 64 with data, else the model's), threads, seed, shapes, inputs
};

struct QuantizedActivation {
  std::string name;
  float lo = 0, hi = 0;  ///< the calibrated range
  float scale = 1;
  int32_t zero_point = 0;
};

/// One node of the float model: its first output in the int8 model against the float one.
struct NodeNoise {
  std::string node, op_type, output;
  double sqnr_db = 0;  ///< +inf where equal
};

struct QuantizeReport {
  std::string model, output, method;
  std::string calibration;  ///< where the calibration values came from, in words
  int64_t calibration_rows = 0, batch = 0;
  std::vector<std::string> nodes;    ///< quantised nodes
  std::vector<std::string> skipped;  ///< nodes of the op types left float, with why
  std::vector<std::string> notes;
  int weights = 0, biases = 0;
  std::vector<QuantizedActivation> activations;
  /// Every node of the float model with a float output, in order, on one batch (the first
  /// test batch, or the first calibration batch of random inputs).
  std::vector<NodeNoise> noise;
  int first_noisy = -1;  ///< index into `noise` of the first node below the threshold
  double sqnr_threshold = 20;
  double output_sqnr_db = 0;  ///< output 0 on that batch
  /// With labelled image data: both models over the test split.
  bool evaluated = false;
  std::string evaluation;  ///< what was evaluated, or why nothing was
  double accuracy_f32 = 0, accuracy_int8 = 0, top1_agreement = 0;
  int64_t eval_rows = 0;
};

/// Calibrates o.model, rewrites it to QDQ and writes it to o.output (if set), then measures
/// the int8 model beside the float one. Errors name the option, the model, the node or the
/// tensor (a tensor that is NaN or infinite on the calibration data).
Expected<QuantizeReport> quantize_model(const QuantizeOptions& o);

/// The calibrated QDQ model as loaded (symbolic dimensions kept), without writing or
/// evaluating it: what `bench --precision int8` runs. `report` (optional) gets the
/// calibration's part of the report.
Expected<Graph> quantized_graph(const QuantizeOptions& o, QuantizeReport* report);

/// The report as JSON (schema mosaic.quantize/1).
nlohmann::json quantize_report_json(const QuantizeReport& r);

}  // namespace mosaic::api
