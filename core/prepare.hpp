// Turns a freshly loaded graph into a static one: binds the batch dimension, checks
// topology, infers every value's shape, and folds constant subgraphs (PyTorch's
// exporter emits Shape/Gather/Concat/... chains, e.g. for nn.ZeroPad2d).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/graph.hpp"
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
};

struct PrepareReport {
  int folded_nodes = 0;
  int removed_initializers = 0;
  std::vector<std::string> notes;
};

Expected<PrepareReport> prepare_graph(Graph& graph, const KernelRegistry& registry, const PrepareOptions& options);

}  // namespace mosaic
