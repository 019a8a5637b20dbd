#include "api/info.hpp"

#include "backends/registry.hpp"
#include "core/plan.hpp"
#include "core/prepare.hpp"

namespace mosaic::api {

Expected<InfoReport> info(const InfoQuery& q) {
  MOSAIC_RETURN_IF_ERROR(set_num_threads(q.common.threads));  // constant folding runs kernels
  PrepareReport pr;
  auto g = load_prepared(q.model, q.common, &pr);
  if (!g.ok()) return g.status();
  PlanOptions sizes_only;
  sizes_only.allocate = false;  // sizes are computed, not allocated: any batch works
  const auto& reg = builtin_registry();
  auto plan = Plan::build(g.value(), Placement::all_on("naive", {}), reg, sizes_only);
  if (!plan.ok()) return plan.status();
  const Plan& p = *plan.value();
  InfoReport r;
  r.model = q.model;
  r.graph_name = g->name;
  r.opset = g->opset;
  for (const auto& in : g->inputs) {
    const Shape& bound = g->value_descs.at(in.name).shape;
    r.inputs.emplace_back(in.name, g->value_descs.at(in.name).str());
    std::vector<std::pair<std::string, int64_t>> symbols;
    for (size_t d = 0; d < in.dim_params.size() && d < bound.size(); ++d)
      if (!in.dim_params[d].empty()) symbols.emplace_back(in.dim_params[d], bound[d]);
    r.input_symbols.push_back(std::move(symbols));
  }
  for (const auto& out : g->outputs) r.outputs.emplace_back(out.name, g->value_descs.at(out.name).str());
  r.notes = pr.notes;
  r.parameter_count = g->parameter_count();
  r.weight_bytes = p.weight_bytes();
  r.activation_bytes = p.activation_bytes();
  r.attention_bytes = p.attention_bytes();
  r.folded_nodes = pr.folded_nodes;
  r.batch = g->inputs.empty() ? 1 : g->value_descs.at(g->inputs[0].name).shape.at(0);
  for (const auto& [name, t] : g->initializers)
    if (t.dtype() == DType::kF32 && t.numel() > 0 && !g->constants.count(name)) r.parameters.emplace_back(name, t.shape());
  for (const auto& s : p.steps()) {
    const Node& n = p.node(s);
    r.ops[n.op_type]++;
    r.flops += s.flops;
    InfoNode row;
    row.name = n.name;
    row.op = n.op_type;
    // The first output the node has (-1: omitted, as an LSTM's Y where only Y_h is used).
    for (int v : s.out)
      if (v >= 0) {
        row.output_shape = p.values()[v].desc.shape;
        break;
      }
    row.flops = s.flops;
    for (size_t i = 0; i < s.in.size(); ++i)
      if (s.in[i] >= 0 && p.values()[s.in[i]].is_const && p.values()[s.in[i]].desc.dtype == DType::kF32)
        row.parameters += p.values()[s.in[i]].desc.numel();
    // Which backends take this node: their capability queries, nothing built.
    KernelContext ctx;
    ctx.node = &n;
    ctx.opset = g->opset;
    for (int v : s.in) {
      ctx.inputs.push_back(v < 0 ? TensorDesc{} : p.values()[v].desc);
      ctx.input_present.push_back(v >= 0);
      ctx.constants.push_back(v >= 0 && p.values()[v].is_const ? &p.values()[v].tensor : nullptr);
    }
    for (int v : s.out) {
      ctx.outputs.push_back(v < 0 ? TensorDesc{} : p.values()[v].desc);
      ctx.output_present.push_back(v >= 0);
    }
    for (const auto& b : reg.backends())
      if (reg.query(b, ctx).accepted()) row.backends.push_back(b);
    r.nodes.push_back(std::move(row));
  }
  return r;
}

nlohmann::json info_json(const InfoReport& r) {
  nlohmann::json inputs = nlohmann::json::array(), outputs = nlohmann::json::array(),
                 params = nlohmann::json::array(), nodes = nlohmann::json::array();
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    nlohmann::json symbolic = nlohmann::json::object();
    if (i < r.input_symbols.size())
      for (const auto& [name, size] : r.input_symbols[i]) symbolic[name] = size;
    inputs.push_back({{"name", r.inputs[i].first}, {"desc", r.inputs[i].second}, {"symbolic", symbolic}});
  }
  for (const auto& [n, d] : r.outputs) outputs.push_back({{"name", n}, {"desc", d}});
  for (const auto& [n, s] : r.parameters) params.push_back({{"name", n}, {"shape", s}});
  for (const auto& n : r.nodes)
    nodes.push_back({{"name", n.name}, {"op", n.op}, {"output_shape", n.output_shape}, {"parameters", n.parameters},
                     {"flops", n.flops}, {"backends", n.backends}});
  return {{"schema", "mosaic.info/1"}, {"model", r.model}, {"graph", r.graph_name}, {"opset", r.opset},
          {"batch", r.batch}, {"inputs", inputs}, {"outputs", outputs}, {"notes", r.notes},
          {"parameter_count", r.parameter_count}, {"weight_bytes", r.weight_bytes},
          {"activation_bytes", r.activation_bytes}, {"attention_bytes", r.attention_bytes},
          {"folded_nodes", r.folded_nodes}, {"ops", r.ops}, {"flops", r.flops}, {"parameters", params},
          {"nodes", nodes}};
}

}  // namespace mosaic::api
