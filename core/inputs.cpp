#include "core/inputs.hpp"

#include <map>
#include <set>
#include <vector>

namespace mosaic {

int64_t index_bound(const Graph& g, const std::string& name, std::string* why) {
  static const std::set<std::string> kPassThrough = {"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Cast"};
  int64_t bound = 0;
  std::vector<std::string> frontier{name};
  std::set<std::string> seen{name};
  while (!frontier.empty()) {
    const std::string v = frontier.back();
    frontier.pop_back();
    for (const Node& n : g.nodes) {
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.inputs[i] != v) continue;
        if (n.op_type == "Gather" && i == 1 && g.value_descs.count(n.inputs[0])) {
          const Shape& data = g.value_descs.at(n.inputs[0]).shape;
          int64_t axis = n.attr_int("axis", 0);
          if (axis < 0) axis += static_cast<int64_t>(data.size());
          if (axis < 0 || axis >= static_cast<int64_t>(data.size()) || data[axis] < 1) continue;
          if (bound == 0 || data[axis] < bound) {
            bound = data[axis];
            if (why)
              *why = "the " + std::to_string(bound) + " rows of '" + n.inputs[0] + "' indexed by node '" + n.name + "'";
          }
        } else if (i == 0 && kPassThrough.count(n.op_type) && !n.outputs.empty() && seen.insert(n.outputs[0]).second) {
          frontier.push_back(n.outputs[0]);
        }
      }
    }
  }
  return bound;
}

void fill_ids(Tensor& t, int64_t bound, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> d(0, bound - 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.i64()[i] = d(rng);
}

}  // namespace mosaic
