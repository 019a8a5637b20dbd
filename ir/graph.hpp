// The model graph: nodes with ONNX-style attributes, graph inputs/outputs, initializers.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ir/status.hpp"
#include "ir/tensor.hpp"

namespace mosaic {

struct Graph;

struct Attribute {
  enum class Kind { kInt, kFloat, kString, kInts, kFloats, kStrings, kTensor, kGraph, kOther };
  Kind kind = Kind::kOther;
  int64_t i = 0;
  float f = 0.f;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  std::shared_ptr<Tensor> t;
  /// A subgraph (If's branches, Loop's and Scan's body), as loaded: its nodes read values of
  /// the enclosing graphs by name, which the loader also appends to the node's inputs.
  std::shared_ptr<const Graph> g;

  static Attribute of_int(int64_t v);
  static Attribute of_float(float v);
  static Attribute of_string(std::string v);
  static Attribute of_ints(std::vector<int64_t> v);
  static Attribute of_floats(std::vector<float> v);
  static Attribute of_strings(std::vector<std::string> v);
  static Attribute of_tensor(Tensor v);
  static Attribute of_graph(Graph v);
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;
  std::vector<std::string> inputs;   ///< "" marks an omitted optional input
  std::vector<std::string> outputs;  ///< "" marks an omitted optional output
  std::map<std::string, Attribute> attrs;

  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
  int64_t attr_int(const std::string& key, int64_t def) const;
  float attr_float(const std::string& key, float def) const;
  std::string attr_string(const std::string& key, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& key, const std::vector<int64_t>& def = {}) const;
  std::vector<float> attr_floats(const std::string& key, const std::vector<float>& def = {}) const;
  /// The subgraph attribute `key`; nullptr if there is none.
  const Graph* attr_graph(const std::string& key) const;
  /// Inputs after the op's own: the enclosing graphs' values its subgraphs read
  /// ("mosaic.outer_scope", set by the loader).
  size_t outer_scope_inputs() const;
  /// True if input i is present (exists and is not the empty name).
  bool has_input(size_t i) const { return i < inputs.size() && !inputs[i].empty(); }
  bool has_output(size_t i) const { return i < outputs.size() && !outputs[i].empty(); }
  /// "node 'conv1' (Conv)" for messages.
  std::string label() const;
  /// The op's key in the schema table and the kernel registry (op_key below).
  std::string op_key() const;
};

/// Where an op lives: ONNX's ops ("" or "ai.onnx") by their op type ("Swish"); another
/// domain's by domain and op type ("com.example.mosaic.Swish", "com.microsoft.QLinearAdd"),
/// so that ops of the same name in different domains never meet. Mosaic's own ops (domain
/// "mosaic", which plugins cannot use) by their op type too ("FusedAttention").
std::string op_key(const std::string& domain, const std::string& op_type);

/// A graph input or output. Unknown dims are -1 (dim_params holds the symbolic name).
struct ValueInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_params;
  bool has_shape = false;
};

/// A float initializer that load folded from DequantizeLinear of integer constants: the codes
/// the model stores beside their scale, so that the fusion pass can give an integer kernel the
/// model's own weights (core/fuse_qdq.cpp) while every float kernel reads the folded floats.
struct Dequantized {
  Tensor codes;       ///< the stored integers (int8, uint8, int32, ...), the float's shape
  Tensor scale;       ///< float32: one value, or one per entry of `axis`
  Tensor zero_point;  ///< the codes' type, shaped like `scale`; undefined: 0
  int64_t axis = 1;   ///< the per-axis axis (non-negative) where `scale` has several values
};

struct Graph {
  std::string name;
  std::string source;    ///< file it was loaded from, for messages
  int64_t opset = 13;
  /// Versions of the other operator domains the model imports (a plugin's custom operators).
  std::map<std::string, int64_t> custom_opsets;
  std::vector<Node> nodes;
  std::vector<ValueInfo> inputs;   ///< runtime inputs (initializers excluded)
  std::vector<ValueInfo> outputs;
  std::map<std::string, Tensor> initializers;
  /// Filled by shape inference: the descriptor of every value.
  std::map<std::string, TensorDesc> value_descs;
  /// Float initializers that are not parameters, so training leaves them: the values of
  /// Constant nodes and what folds from them at load (an exporter's 1.0, -10000, sqrt(d)),
  /// and tensors the fusion pass makes up (core/prepare.cpp, core/fuse_layer_norm.cpp).
  std::set<std::string> constants;
  /// Initializers folded at load from DequantizeLinear of integer constants, by name (core/prepare.cpp).
  std::map<std::string, Dequantized> dequantized;

  /// Number of float parameters held in initializers.
  int64_t parameter_count() const;
  const Node* producer(const std::string& value) const;
  /// Empties the float initializers' tensors, keeping their names (a training plan holds its
  /// own copies; this releases the loaded ones).
  void release_float_initializers();
};

}  // namespace mosaic
