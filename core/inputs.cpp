#include "core/inputs.hpp"

#include <map>
#include <set>
#include <vector>

#include "ir/elements.hpp"
#include "operators/schema.hpp"

namespace mosaic {

namespace {

// Calls fn(node, slot) for every node input that reads `name`, directly or through what passes
// values on unchanged in number (Reshape, Unsqueeze, Squeeze, Flatten, Identity, Cast: their
// input 0).
template <typename Fn>
void for_each_reader(const Graph& g, const std::string& name, Fn fn) {
  static const std::set<std::string> kPassThrough = {"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Cast"};
  std::vector<std::string> frontier{name};
  std::set<std::string> seen{name};
  while (!frontier.empty()) {
    const std::string v = frontier.back();
    frontier.pop_back();
    for (const Node& n : g.nodes)
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.inputs[i] != v) continue;
        fn(n, i);
        if (i == 0 && kPassThrough.count(n.op_type) && !n.outputs.empty() && seen.insert(n.outputs[0]).second)
          frontier.push_back(n.outputs[0]);
      }
  }
}

}  // namespace

int64_t index_bound(const Graph& g, const std::string& name, std::string* why) {
  int64_t bound = 0;
  for_each_reader(g, name, [&](const Node& n, size_t i) {
    if (n.op_type != "Gather" || i != 1 || !g.value_descs.count(n.inputs[0])) return;
    const Shape& data = g.value_descs.at(n.inputs[0]).shape;
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(data.size());
    if (axis < 0 || axis >= static_cast<int64_t>(data.size()) || data[axis] < 1) return;
    if (bound == 0 || data[axis] < bound) {
      bound = data[axis];
      if (why) *why = "the " + std::to_string(bound) + " rows of '" + n.inputs[0] + "' indexed by node '" + n.name + "'";
    }
  });
  return bound;
}

std::string unguessable_reader(const Graph& g, const std::string& name) {
  std::string why;
  for_each_reader(g, name, [&](const Node& n, size_t i) {
    const OpSchema* s = n.domain.empty() || n.domain == "ai.onnx" ? find_schema(n.op_key()) : nullptr;
    if (!why.empty() || !s) return;
    for (int slot : s->shape_inputs)
      if (static_cast<size_t>(slot) == i)
        why = "input " + std::to_string(i) + " of node '" + n.name + "' (" + n.op_type + ") reads it as a shape, axes or position";
  });
  return why;
}

const Node* recurrent_reader(const Graph& g, const std::string& name, size_t* slot) {
  for (const Node& n : g.nodes) {
    if (n.op_type != "RNN" && n.op_type != "GRU" && n.op_type != "LSTM") continue;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (n.inputs[i] == name) {
        *slot = i;
        return &n;
      }
  }
  return nullptr;
}

size_t batch_axis(const Graph& g, const std::string& name) {
  size_t slot = 0;
  const Node* n = recurrent_reader(g, name, &slot);
  const bool time_major = n && n->attr_int("layout", 0) == 0;
  return time_major && (slot == 0 || slot == 5 || slot == 6) ? 1 : 0;
}

int64_t sequence_length_bound(const Graph& g, const std::string& name, std::string* why) {
  size_t slot = 0;
  const Node* n = recurrent_reader(g, name, &slot);
  if (!n || slot != 4 || n->inputs.empty()) return 0;
  const auto x = g.value_descs.find(n->inputs[0]);
  if (x == g.value_descs.end() || x->second.shape.size() != 3) return 0;
  const int64_t t = x->second.shape[n->attr_int("layout", 0) == 0 ? 0 : 1];
  if (why) *why = "the sequence length of node '" + n->name + "' (" + n->op_type + ")";
  return t;
}

void fill_ids(Tensor& t, int64_t bound, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> d(0, bound - 1);
  for (int64_t i = 0; i < t.numel(); ++i) store_i64(t.dtype(), t.data(), i, d(rng));
}

}  // namespace mosaic
