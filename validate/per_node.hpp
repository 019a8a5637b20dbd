// Per-node agreement with the naive oracle: which node diverges, and by how much.
//
// The naive backend runs the whole graph once, keeping every intermediate value. Then each
// node runs alone on the backend its placement names, on exactly naive's inputs for that
// node, and its outputs are compared with naive's (max abs, max rel, and the L2 norm of the
// difference relative to the reference's: Deep500's norm metrics). A node is judged on its
// own kernel only, not on error accumulated upstream, so the first node out of tolerance
// (in topological order) is the one to look at, as benchdnn checks one primitive at a time.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "core/kernel.hpp"
#include "core/plan.hpp"

namespace mosaic {

struct NodeAgreement {
  NodeAgreement(std::string n, std::string o, std::string b) : node(std::move(n)), op(std::move(o)), backend(std::move(b)) {}
  std::string node, op, backend;
  bool ran = true;          ///< false: the backend declined the node (`note` says why)
  bool ok = true;           ///< every output within rtol/atol of naive's
  double max_abs = 0, max_rel = 0, rel_l2 = 0;
  std::string note;
  /// Backward: input elements exactly on a kink (Relu/LeakyRelu at 0, Clip at a bound),
  /// whose one-sided gradients are not compared (per_node.cpp).
  int64_t note_kinks = 0;
};

struct PerNodeReport {
  std::vector<NodeAgreement> nodes;
  /// Index into nodes of the first that ran and left tolerance, or -1.
  int first_divergent = -1;
};

/// `graph` with every node output also a graph output, so a plan keeps (and returns) all of
/// them; the original outputs come first.
Graph with_every_value_as_output(const Graph& graph);

/// Compares every float-producing node of `graph` (prepared) placed by `placement` with the
/// naive oracle on `inputs`.
Expected<PerNodeReport> compare_per_node(const Graph& graph, const KernelRegistry& registry, const Placement& placement,
                                         const std::vector<Tensor>& inputs, double rtol, double atol);

/// The same for the backward of a training step (cross-entropy of output 0 against
/// `labels`): naive trains the whole graph once, keeping every forward value and the gradient
/// arriving at every value; then each node's backward runs alone on naive and on its backend
/// from the same inputs and output gradients, and the input and parameter gradients are
/// compared (on the scale of each gradient's largest element).
Expected<PerNodeReport> compare_per_node_backward(const Graph& graph, const KernelRegistry& registry,
                                                  const Placement& placement, const std::vector<Tensor>& inputs,
                                                  const Tensor& labels, double rtol, double atol);

}  // namespace mosaic
