#include "core/fuse_match.hpp"

#include <algorithm>
#include <set>

namespace mosaic::fuse {

Matcher::Matcher(const Graph& g) : g_(g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer_[o] = i;
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty()) ++uses_[in];
  }
  for (const auto& o : g.outputs) uses_[o.name] += 1000;  // never fuse away a graph output
}

const Node* Matcher::made_by(const std::string& v, const char* op) const {
  auto it = producer_.find(v);
  return it != producer_.end() && g_.nodes[it->second].op_key() == op ? &g_.nodes[it->second] : nullptr;
}

int Matcher::uses(const std::string& v) const {
  auto it = uses_.find(v);
  return it == uses_.end() ? 0 : it->second;
}

bool Matcher::once(const std::string& v) const { return uses(v) == 1; }

const Node* Matcher::sole_consumer(const std::string& v, const char* op) const {
  if (!once(v)) return nullptr;
  for (const auto& n : g_.nodes)
    if (std::find(n.inputs.begin(), n.inputs.end(), v) != n.inputs.end()) return n.op_key() == op ? &n : nullptr;
  return nullptr;
}

std::optional<double> Matcher::scalar(const std::string& v) const {
  auto c = g_.initializers.find(v);
  if (c == g_.initializers.end() || c->second.numel() != 1 || c->second.dtype() != DType::kF32) return std::nullopt;
  return c->second.get(0);
}

std::string Matcher::other(const Node& n, const std::string& v) {
  if (n.inputs.size() != 2) return "";
  if (n.inputs[0] == v) return n.inputs[1];
  if (n.inputs[1] == v) return n.inputs[0];
  return "";
}

const TensorDesc* desc_of(const Graph& g, const std::string& v) {
  auto it = g.value_descs.find(v);
  return it == g.value_descs.end() ? nullptr : &it->second;
}

std::string fresh_name(const Graph& g, const std::string& base) {
  std::string name = base;
  for (int i = 2; g.initializers.count(name) || g.value_descs.count(name); ++i) name = base + "." + std::to_string(i);
  return name;
}

std::string add_constant(Graph& g, const std::string& base, Tensor t) {
  const std::string name = fresh_name(g, base);
  g.value_descs[name] = t.desc();
  g.initializers[name] = std::move(t);
  g.constants.insert(name);
  return name;
}

void drop_constants(Graph& g, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    g.initializers.erase(name);
    g.value_descs.erase(name);
    g.constants.erase(name);
  }
}

void replace_nodes(Graph& g, const std::vector<const Node*>& parts, Node fused, FuseReport& report) {
  std::set<const Node*> gone(parts.begin(), parts.end());
  size_t last = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (gone.count(&g.nodes[i])) last = i;
  const std::set<std::string> keep(fused.outputs.begin(), fused.outputs.end());
  for (const Node* n : parts)
    for (const auto& o : n->outputs)
      if (!keep.count(o)) g.value_descs.erase(o);
  report.fused.push_back(fused.name);
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (i == last) kept.push_back(std::move(fused));
    else if (!gone.count(&g.nodes[i])) kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
}

}  // namespace mosaic::fuse
