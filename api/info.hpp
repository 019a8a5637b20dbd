// info as a library function: what a model is, at a given batch: inputs and outputs, parameter
// count and bytes, nodes by op type, forward FLOPs, planned memory, and per node its output,
// parameters, FLOPs and which backends take it (their capability queries; nothing is built or
// allocated, so any batch works). `mosaic info` prints the report.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/models.hpp"
#include "ir/status.hpp"

namespace mosaic::api {

struct InfoQuery {
  CommonOptions common;
  std::string model;
};

struct InfoNode {
  std::string name, op;
  Shape output_shape;
  int64_t parameters = 0;
  double flops = 0;
  std::vector<std::string> backends;  ///< the registered backends that take it
};

struct InfoReport {
  std::string model, graph_name;
  int64_t opset = 0, batch = 1;
  std::vector<std::pair<std::string, std::string>> inputs, outputs;  ///< name, "f32[1,3,32,32]"
  /// Per input, its symbolic dimensions as the model names them (ONNX dim_param) and the
  /// size each was bound to (--batch, --shape): {"batch", 2}, {"sequence", 128}; in order.
  std::vector<std::vector<std::pair<std::string, int64_t>>> input_symbols;
  std::vector<std::string> notes;
  int64_t parameter_count = 0;
  size_t weight_bytes = 0, activation_bytes = 0, attention_bytes = 0;
  int64_t folded_nodes = 0;
  std::map<std::string, int> ops;  ///< op type -> nodes
  double flops = 0;                ///< forward, per batch
  /// Trainable parameters by name (what train's `freeze` matches): name, shape.
  std::vector<std::pair<std::string, Shape>> parameters;
  std::vector<InfoNode> nodes;
};

/// Loads and prepares q.model at q.common's batch and shapes. Errors: the model does not load,
/// or a node no backend can run.
Expected<InfoReport> info(const InfoQuery& q);

/// The report as JSON (schema mosaic.info/1, docs/json-schema.md).
nlohmann::json info_json(const InfoReport& r);

}  // namespace mosaic::api
