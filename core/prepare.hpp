// Turns a freshly loaded graph into a static one: binds the batch dimension, checks
// topology, infers every value's shape, and folds constant subgraphs (PyTorch's
// exporter emits Shape/Gather/Concat/... chains, e.g. for nn.ZeroPad2d).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "core/kernel.hpp"

namespace mosaic {

struct PrepareOptions {
  int64_t batch = 0;          ///< 0: keep fixed batch dims, bind symbolic ones to 1
  /// Symbolic dimensions bound by name (--shape NAME=N); the batch dimension too, unless
  /// `batch` is set. A name no input uses is an error.
  std::map<std::string, int64_t> dims;
  std::string fold_backend = "naive";
  /// Graph inputs given values at load time (e.g. int64 shape arguments of a test case):
  /// they become initializers, so the shapes that depend on them are static.
  std::map<std::string, Tensor> constant_inputs;
  /// Fold nodes that read the model's float initializers too. Training plans keep them
  /// (false): a weight that is expanded, transposed or gathered from at run time (a ViT's
  /// class token broadcast to the batch, a weight-tied LM head, a position table) must
  /// stay one parameter with its gradient, not become a constant copy per use. Identity
  /// nodes still fold: their output becomes a parameter of its own (PyTorch's exporter
  /// writes equal-valued parameters as one initializer plus Identity nodes).
  bool fold_parameters = true;
  /// Where set, a node whose output shapes depend on its inputs' values (its shape inference
  /// asks for a value that is not a constant and fails: NonZero, NonMaxSuppression, an If
  /// whose branches differ) is planned from input values instead of refused. Called at most
  /// once, with the graph as bound (its inputs' descriptors in value_descs), it returns one
  /// value per graph input; a copy of the graph folded on them gives such nodes' output
  /// descriptors, and each is marked to be evaluated and checked at run time
  /// (core/run_time_shape.hpp). The plan is then valid for inputs that give the same shapes.
  std::function<Expected<std::vector<Tensor>>(const Graph& bound)> specialise;
};

struct PrepareReport {
  int folded_nodes = 0;
  int removed_initializers = 0;
  std::vector<std::string> notes;
  /// The nodes planned from input values (PrepareOptions::specialise), by label.
  std::vector<std::string> run_time_shapes;
};

Expected<PrepareReport> prepare_graph(Graph& graph, const KernelRegistry& registry, const PrepareOptions& options);

/// Drops the initializers that no node reads and no graph output names (with their mark in
/// Graph::constants): prepare_graph's last step, and fuse_graph's after it folds weights.
/// Returns how many it dropped.
int drop_unused_initializers(Graph& graph);

}  // namespace mosaic
