#include "validate/per_node.hpp"

#include <map>
#include <set>

#include "metrics/compare.hpp"

namespace mosaic {

Graph with_every_value_as_output(const Graph& graph) {
  Graph all = graph;
  std::set<std::string> listed;
  for (const auto& o : all.outputs) listed.insert(o.name);
  for (const auto& n : graph.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty() && !listed.count(o)) {
        all.outputs.push_back(ValueInfo{o, graph.value_descs.at(o).dtype, graph.value_descs.at(o).shape, {}, true});
        listed.insert(o);
      }
  return all;
}

Expected<PerNodeReport> compare_per_node(const Graph& graph, const KernelRegistry& registry, const Placement& placement,
                                         const std::vector<Tensor>& inputs, double rtol, double atol) {
  // Naive once, with every node output made a graph output so that none is reused.
  const Graph all = with_every_value_as_output(graph);
  MOSAIC_ASSIGN_OR_RETURN(auto naive, Plan::build(all, Placement::all_on("naive", {}), registry));
  std::vector<Tensor> outs;
  MOSAIC_RETURN_IF_ERROR(naive->run(inputs, &outs));
  std::map<std::string, Tensor> value;
  for (size_t i = 0; i < graph.inputs.size() && i < inputs.size(); ++i) value[graph.inputs[i].name] = inputs[i];
  for (size_t i = 0; i < all.outputs.size(); ++i) value[all.outputs[i].name] = outs[i];

  PerNodeReport report;
  for (const auto& n : graph.nodes) {
    if (n.outputs.empty() || graph.value_descs.at(n.outputs[0]).dtype != DType::kF32) continue;
    NodeAgreement a;
    a.node = n.name;
    a.op = n.op_type;
    a.backend = placement.backend_for(n);
    // The node alone: runtime inputs become graph inputs fed with naive's values.
    Graph one;
    one.source = graph.source;
    one.opset = graph.opset;
    one.nodes.push_back(n);
    std::vector<Tensor> feed;
    for (const auto& in : n.inputs) {
      if (in.empty() || one.initializers.count(in)) continue;
      auto init = graph.initializers.find(in);
      if (init != graph.initializers.end()) {
        one.initializers[in] = init->second;
      } else if (std::none_of(one.inputs.begin(), one.inputs.end(), [&](const ValueInfo& v) { return v.name == in; })) {
        const TensorDesc& d = graph.value_descs.at(in);
        one.inputs.push_back(ValueInfo{in, d.dtype, d.shape, {}, true});
        feed.push_back(value.at(in));
      }
      one.value_descs[in] = graph.value_descs.at(in);
    }
    for (const auto& o : n.outputs)
      if (!o.empty()) {
        one.outputs.push_back(ValueInfo{o, graph.value_descs.at(o).dtype, graph.value_descs.at(o).shape, {}, true});
        one.value_descs[o] = graph.value_descs.at(o);
      }
    auto plan = Plan::build(one, Placement::all_on(a.backend, {}), registry);
    if (!plan.ok()) {
      if (plan.status().code() != StatusCode::kUnsupported) return plan.status();
      a.ran = false;
      a.note = plan.status().message();
      report.nodes.push_back(a);
      continue;
    }
    std::vector<Tensor> got;
    MOSAIC_RETURN_IF_ERROR(plan.value()->run(feed, &got).with_context(n.label()));
    for (size_t k = 0; k < got.size(); ++k) {
      if (got[k].dtype() != DType::kF32) continue;
      const Agreement c = compare_tensors(got[k], value.at(one.outputs[k].name), rtol, atol);
      a.max_abs = std::max(a.max_abs, c.max_abs);
      a.max_rel = std::max(a.max_rel, c.max_rel);
      a.rel_l2 = std::max(a.rel_l2, c.rel_l2);
      if (!c.ok && a.ok) {
        a.ok = false;
        a.note = "output '" + one.outputs[k].name + "' " + c.message;
      }
    }
    if (!a.ok && report.first_divergent < 0) report.first_divergent = static_cast<int>(report.nodes.size());
    report.nodes.push_back(a);
  }
  return report;
}

}  // namespace mosaic
