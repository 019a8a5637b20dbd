// One schema per ONNX op: arity, shape inference, analytic FLOPs. No compute code.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "operators/onnx_versions.hpp"
#include "operators/op_context.hpp"
#include "ir/status.hpp"

namespace mosaic {

struct OpSchema {
  std::string op_type;
  /// "" for ONNX's own operators; a custom operator's domain ("com.example"), which the
  /// nodes that use it must carry (a plugin's operator, backends/plugin.hpp).
  std::string domain;
  /// The ONNX versions of the op Mosaic implements (operators/onnx_versions.hpp): a node
  /// whose version falls outside them is refused, naming them. Empty for custom operators.
  std::vector<VersionRange> versions;
  int min_inputs = 1, max_inputs = 1;
  int min_outputs = 1, max_outputs = 1;
  /// Output descriptors from input descriptors (and constant inputs where the op needs values).
  Expected<std::vector<TensorDesc>> (*infer)(const OpContext& ctx) = nullptr;
  /// Forward floating-point operations (a multiply-add counts as 2).
  double (*flops)(const OpContext& ctx) = nullptr;
  /// Backward FLOPs per input: entry i is the cost of the gradient with respect to input i
  /// (docs/metrics.md). Empty: no FLOPs (data movement, views, folding-only ops).
  std::vector<double> (*backward_flops)(const OpContext& ctx) = nullptr;
  /// True for ops that mostly compute shapes/constants (Shape, Gather, ...): they normally
  /// fold away at load time; on run-time data only the naive backend runs them.
  bool folding_only = false;
  /// Inputs that are statistics or shapes, never trained (BatchNormalization's running mean
  /// and variance).
  std::vector<int> non_trainable_inputs;
  /// Inputs read as shapes, axes, counts or positions (Reshape's shape, Slice's starts,
  /// Trilu's k), not as values: a graph input that reaches one cannot be made up at random
  /// (core/inputs.hpp, `--input NAME=FILE`).
  std::vector<int> shape_inputs;
  std::string summary;
};

/// Adds (or replaces) the schema of `op_type` in a table under construction, with one output
/// and no gradient; the caller sets the rest. The op families' files use it
/// (operators/schemas.cpp, pointwise.cpp, indexing.cpp, resize.cpp).
OpSchema& add_schema(std::map<std::string, OpSchema>& table, const std::string& op_type, int min_inputs,
                     int max_inputs, Expected<std::vector<TensorDesc>> (*infer)(const OpContext&),
                     double (*flops)(const OpContext&), std::string summary);

/// The element types of index inputs (Gather's indices, ScatterND's): int64 and int32.
inline bool is_index_dtype(DType d) { return d == DType::kI64 || d == DType::kI32; }

/// Whether a custom operator's schema could be added: a domain other than ONNX's, an op
/// type no schema has, `infer` and `flops` given, a consistent arity.
Status check_schema(const OpSchema& schema);
/// Adds custom operators' schemas (a plugin's), all or none: each needs a domain other
/// than ONNX's, a new op type, and `infer` and `flops`. Not thread-safe: call before any
/// graph is prepared.
Status add_schemas(std::vector<OpSchema> schemas);
/// The schema for an op type, or nullptr.
/// The schema of an op by its key (Node::op_key: "Conv", "com.example.mosaic.Swish"), or nullptr.
const OpSchema* find_schema(const std::string& key);
/// Every op type that has a schema, sorted.
std::vector<std::string> schema_names();
/// Runs the schema's checks and shape inference for a node, with the node named in errors.
Expected<std::vector<TensorDesc>> infer_node(const OpContext& ctx);
/// Forward FLOPs of a node with known input/output descriptors.
double node_flops(const OpContext& ctx);
/// Backward FLOPs per input of a node (one entry per input; 0 where not counted).
std::vector<double> node_backward_flops(const OpContext& ctx);

}  // namespace mosaic
