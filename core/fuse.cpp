#include "core/fuse.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace mosaic {
namespace {

/// Number of uses of each value (node inputs and graph outputs).
std::map<std::string, int> use_counts(const Graph& g) {
  std::map<std::string, int> uses;
  for (const auto& n : g.nodes)
    for (const auto& in : n.inputs)
      if (!in.empty()) ++uses[in];
  for (const auto& o : g.outputs) uses[o.name] += 1000;  // never fuse away a graph output
  return uses;
}

/// Zero constant padding on the spatial axes only, as Conv pads (begin..., end...).
bool spatial_zero_pads(const Graph& g, const Node& pad, std::vector<int64_t>* out) {
  if (pad.attr_string("mode", "constant") != "constant") return false;
  std::vector<int64_t> pads;
  if (g.opset < 11) {
    if (pad.attr_float("value", 0.f) != 0.f) return false;
    pads = pad.attr_ints("pads");
  } else {
    if (!pad.has_input(1) || !g.initializers.count(pad.inputs[1])) return false;
    pads = g.initializers.at(pad.inputs[1]).to_i64_vector();
    if (pad.has_input(2)) {
      auto v = g.initializers.find(pad.inputs[2]);
      if (v == g.initializers.end() || (v->second.numel() && v->second.get(0) != 0)) return false;
    }
    if (pad.has_input(3)) return false;
  }
  const size_t r = pads.size() / 2;
  if (r < 3 || pads.size() != 2 * r) return false;
  for (auto p : pads)
    if (p < 0) return false;
  if (pads[0] || pads[1] || pads[r] || pads[r + 1]) return false;  // batch / channel padding
  out->clear();
  for (size_t i = 2; i < r; ++i) out->push_back(pads[i]);
  for (size_t i = 2; i < r; ++i) out->push_back(pads[r + i]);
  return true;
}

}  // namespace

FuseReport fuse_graph(Graph& g, const FuseOptions& options) {
  FuseReport report;
  bool changed = true;
  while (changed) {
    changed = false;
    auto uses = use_counts(g);
    std::map<std::string, size_t> producer;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& o : g.nodes[i].outputs)
        if (!o.empty()) producer[o] = i;
    for (size_t ci = 0; ci < g.nodes.size() && !changed; ++ci) {
      Node& consumer = g.nodes[ci];
      if (consumer.inputs.empty() || consumer.inputs[0].empty()) continue;
      auto p = producer.find(consumer.inputs[0]);
      if (p == producer.end() || uses[consumer.inputs[0]] != 1) continue;
      Node& prod = g.nodes[p->second];
      // Pad -> Conv
      if (consumer.op_type == "Conv" && prod.op_type == "Pad" &&
          consumer.attr_string("auto_pad", "NOTSET") == "NOTSET") {
        std::vector<int64_t> extra;
        if (!spatial_zero_pads(g, prod, &extra)) continue;
        std::vector<int64_t> pads = consumer.attr_ints("pads", std::vector<int64_t>(extra.size(), 0));
        if (pads.size() != extra.size()) continue;
        for (size_t i = 0; i < pads.size(); ++i) pads[i] += extra[i];
        consumer.attrs["pads"] = Attribute::of_ints(pads);
        g.value_descs.erase(consumer.inputs[0]);
        consumer.inputs[0] = prod.inputs[0];
        consumer.name = prod.name + "+" + consumer.name;
        g.nodes.erase(g.nodes.begin() + static_cast<long>(p->second));
        changed = true;
        continue;
      }
      // Conv/Gemm -> activation
      const bool act = consumer.op_type == "Relu" || consumer.op_type == "LeakyRelu" || consumer.op_type == "Clip";
      if (!act || !options.activations || (prod.op_type != "Conv" && prod.op_type != "Gemm") ||
          prod.has_attr("mosaic.activation"))
        continue;
      if (consumer.op_type == "Clip") {
        float lo = -INFINITY, hi = INFINITY;
        if (g.opset < 11) {
          lo = consumer.attr_float("min", lo);
          hi = consumer.attr_float("max", hi);
        } else {
          bool ok = true;
          for (size_t i = 1; i < consumer.inputs.size(); ++i) {
            if (consumer.inputs[i].empty()) continue;
            auto c = g.initializers.find(consumer.inputs[i]);
            if (c == g.initializers.end()) ok = false;
            else (i == 1 ? lo : hi) = static_cast<float>(c->second.get(0));
          }
          if (!ok) continue;
        }
        prod.attrs["mosaic.min"] = Attribute::of_float(lo);
        prod.attrs["mosaic.max"] = Attribute::of_float(hi);
      }
      if (consumer.op_type == "LeakyRelu") prod.attrs["mosaic.alpha"] = Attribute::of_float(consumer.attr_float("alpha", 0.01f));
      prod.attrs["mosaic.activation"] = Attribute::of_string(consumer.op_type);
      g.value_descs.erase(prod.outputs[0]);
      prod.outputs[0] = consumer.outputs[0];
      prod.name = prod.name + "+" + consumer.name;
      report.fused.push_back(prod.name);
      g.nodes.erase(g.nodes.begin() + static_cast<long>(ci));
      changed = true;
    }
  }
  for (const auto& n : g.nodes)
    if (n.name.find('+') != std::string::npos &&
        std::find(report.fused.begin(), report.fused.end(), n.name) == report.fused.end())
      report.fused.push_back(n.name);
  return report;
}

}  // namespace mosaic
