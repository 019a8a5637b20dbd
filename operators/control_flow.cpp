#include "operators/control_flow.hpp"

#include "ir/graph.hpp"
#include "operators/params.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

SubgraphInference g_inference = nullptr;

Expected<std::vector<TensorDesc>> infer_with_subgraphs(const OpContext& c) {
  if (!g_inference)
    return Status::unsupported(c.node->label() + ": " + c.node->op_type + "'s outputs come from its subgraphs, which "
                               "only a graph being prepared can infer");
  return g_inference(c);
}

double f_zero(const OpContext&) { return 0; }

// Declared inputs (before the outer-scope ones) and outputs have no fixed upper bound.
constexpr int kMany = 1 << 16;

}  // namespace

void set_subgraph_inference(SubgraphInference f) { g_inference = f; }
SubgraphInference subgraph_inference() { return g_inference; }

Expected<ScanParams> scan_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  ScanParams p;
  const int64_t declared = static_cast<int64_t>(n.inputs.size() - n.outer_scope_inputs());
  p.scan_inputs = n.attr_int("num_scan_inputs", 0);
  if (p.scan_inputs < 1 || p.scan_inputs > declared)
    return Status::invalid(n.label() + ": num_scan_inputs " + std::to_string(p.scan_inputs) + " with " +
                           std::to_string(declared) + " inputs");
  p.states = declared - p.scan_inputs;
  p.scan_outputs = static_cast<int64_t>(n.outputs.size()) - p.states;
  if (p.scan_outputs < 0)
    return Status::invalid(n.label() + ": " + std::to_string(n.outputs.size()) + " outputs for " +
                           std::to_string(p.states) + " states");
  auto list = [&](const char* key, int64_t count) -> Expected<std::vector<int64_t>> {
    std::vector<int64_t> v = n.attr_ints(key, std::vector<int64_t>(static_cast<size_t>(count), 0));
    if (static_cast<int64_t>(v.size()) != count)
      return Status::invalid(n.label() + ": " + key + " has " + std::to_string(v.size()) + " values, expected " +
                             std::to_string(count));
    return v;
  };
  MOSAIC_ASSIGN_OR_RETURN(p.in_axes, list("scan_input_axes", p.scan_inputs));
  MOSAIC_ASSIGN_OR_RETURN(p.in_reverse, list("scan_input_directions", p.scan_inputs));
  MOSAIC_ASSIGN_OR_RETURN(p.out_axes, list("scan_output_axes", p.scan_outputs));
  MOSAIC_ASSIGN_OR_RETURN(p.out_reverse, list("scan_output_directions", p.scan_outputs));
  for (int64_t m = 0; m < p.scan_inputs; ++m) {
    const Shape& s = ctx.inputs[static_cast<size_t>(p.states + m)].shape;
    MOSAIC_ASSIGN_OR_RETURN(p.in_axes[static_cast<size_t>(m)],
                            normalize_axis(p.in_axes[static_cast<size_t>(m)], static_cast<int64_t>(s.size()), n));
    if (s.empty()) return Status::invalid(n.label() + ": scan input " + std::to_string(m) + " is a scalar");
    const int64_t len = s[static_cast<size_t>(p.in_axes[static_cast<size_t>(m)])];
    if (m == 0) p.length = len;
    else if (len != p.length)
      return Status::invalid(n.label() + ": scan inputs have " + std::to_string(p.length) + " and " +
                             std::to_string(len) + " steps");
  }
  return p;
}

void add_control_flow_schemas(std::map<std::string, OpSchema>& t) {
  OpSchema& i = add_schema(t, "If", 1, kMany, infer_with_subgraphs, f_zero,
                           "then_branch or else_branch, by a boolean condition");
  i.min_outputs = 1;
  i.max_outputs = kMany;
  // Loop's M and cond may be "": core checks that the two slots are there.
  OpSchema& l = add_schema(t, "Loop", 0, kMany, infer_with_subgraphs, f_zero,
                           "body while cond holds, up to M times; loop-carried values and stacked scan outputs");
  l.min_outputs = 0;
  l.max_outputs = kMany;
  OpSchema& s = add_schema(t, "Scan", 1, kMany, infer_with_subgraphs, f_zero,
                           "body over slices of the scan inputs, carrying state; stacked scan outputs");
  s.min_outputs = 1;
  s.max_outputs = kMany;
  for (const char* op : {"If", "Loop", "Scan"}) t[op].backward_flops = nullptr;
}

}  // namespace mosaic
