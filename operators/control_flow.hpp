// ONNX's control flow: If (one of two subgraphs), Loop (a body run while a condition holds,
// up to a trip count) and Scan (a body run over slices of its inputs, carrying state). Their
// subgraphs read values of the enclosing graph by name; the loader appends those to the
// node's inputs ("mosaic.outer_scope"), so they are ordinary dependencies for the planner.
// Inferring a node's outputs means preparing its subgraphs, which only core can do
// (core/control_flow.hpp): core installs that inference here.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/status.hpp"
#include "operators/op_context.hpp"

namespace mosaic {

struct OpSchema;

/// Output descriptors of a node with subgraphs, from its prepared subgraphs.
using SubgraphInference = Expected<std::vector<TensorDesc>> (*)(const OpContext& ctx);
/// Installed by core while it prepares a graph; nullptr removes it.
void set_subgraph_inference(SubgraphInference f);
SubgraphInference subgraph_inference();

/// Scan's geometry: N states, M scan inputs and K scan outputs, their axes and directions,
/// and the sequence length T.
struct ScanParams {
  int64_t states = 0, scan_inputs = 0, scan_outputs = 0, length = 0;
  std::vector<int64_t> in_axes, in_reverse, out_axes, out_reverse;
};
Expected<ScanParams> scan_params(const OpContext& ctx);

void add_control_flow_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
