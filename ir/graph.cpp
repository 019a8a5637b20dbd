#include "ir/graph.hpp"

namespace mosaic {

Attribute Attribute::of_int(int64_t v) { Attribute a; a.kind = Kind::kInt; a.i = v; return a; }
Attribute Attribute::of_float(float v) { Attribute a; a.kind = Kind::kFloat; a.f = v; return a; }
Attribute Attribute::of_string(std::string v) { Attribute a; a.kind = Kind::kString; a.s = std::move(v); return a; }
Attribute Attribute::of_ints(std::vector<int64_t> v) { Attribute a; a.kind = Kind::kInts; a.ints = std::move(v); return a; }
Attribute Attribute::of_floats(std::vector<float> v) { Attribute a; a.kind = Kind::kFloats; a.floats = std::move(v); return a; }
Attribute Attribute::of_strings(std::vector<std::string> v) { Attribute a; a.kind = Kind::kStrings; a.strings = std::move(v); return a; }
Attribute Attribute::of_tensor(Tensor v) {
  Attribute a;
  a.kind = Kind::kTensor;
  a.t = std::make_shared<Tensor>(std::move(v));
  return a;
}

Attribute Attribute::of_graph(Graph v) {
  Attribute a;
  a.kind = Kind::kGraph;
  a.g = std::make_shared<const Graph>(std::move(v));
  return a;
}

const Graph* Node::attr_graph(const std::string& key) const {
  auto it = attrs.find(key);
  return it != attrs.end() && it->second.kind == Attribute::Kind::kGraph ? it->second.g.get() : nullptr;
}

size_t Node::outer_scope_inputs() const {
  auto it = attrs.find("mosaic.outer_scope");
  return it == attrs.end() ? 0 : it->second.strings.size();
}

int64_t Node::attr_int(const std::string& key, int64_t def) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? def : it->second.i;
}
float Node::attr_float(const std::string& key, float def) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? def : it->second.f;
}
std::string Node::attr_string(const std::string& key, const std::string& def) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? def : it->second.s;
}
std::vector<int64_t> Node::attr_ints(const std::string& key, const std::vector<int64_t>& def) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? def : it->second.ints;
}
std::vector<float> Node::attr_floats(const std::string& key, const std::vector<float>& def) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? def : it->second.floats;
}

std::string op_key(const std::string& domain, const std::string& op_type) {
  if (domain.empty() || domain == "ai.onnx" || domain == "mosaic") return op_type;
  return domain + "." + op_type;
}

std::string Node::op_key() const { return mosaic::op_key(domain, op_type); }

std::string Node::label() const {
  return "node '" + (name.empty() ? (outputs.empty() ? std::string("?") : outputs[0]) : name) + "' (" + op_type + ")";
}

void Graph::release_float_initializers() {
  for (auto& kv : initializers)
    if (kv.second.dtype() == DType::kF32) kv.second = Tensor();
}

int64_t Graph::parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, t] : initializers)
    if (t.dtype() == DType::kF32 && !constants.count(name)) n += t.numel();
  return n;
}

const Node* Graph::producer(const std::string& value) const {
  for (const auto& node : nodes)
    for (const auto& out : node.outputs)
      if (out == value) return &node;
  return nullptr;
}

}  // namespace mosaic
