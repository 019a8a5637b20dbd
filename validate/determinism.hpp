// Determinism audit: does one training step give bitwise the same results when repeated, and
// when run on another number of threads? Per node (forward outputs) and per parameter
// (gradients), with the drift in units in the last place (ULP) where they differ.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "core/kernel.hpp"

namespace mosaic {

struct DeterminismRow {
  std::string what;              ///< "'conv1' (Conv)" for a node output, "grad conv1.weight" for a gradient
  int64_t repeat_max_ulp = 0;    ///< same threads, a fresh plan: 0 = bitwise identical
  int64_t threads_max_ulp = 0;   ///< `threads` vs 1 thread
};

struct DeterminismReport {
  std::string backend;
  int threads = 1;
  std::vector<DeterminismRow> nodes, gradients;
};

/// Distance between two floats in units in the last place (0: identical bits; NaNs compare
/// by bits, so a NaN is far from everything but itself).
int64_t ulp_distance(float a, float b);

/// Runs forward + cross-entropy loss + backward of `graph` (prepared) on `backend` (no
/// fallback) three times, each on a fresh plan: twice with `threads`, once with 1 thread.
Expected<DeterminismReport> audit_determinism(const Graph& graph, const KernelRegistry& registry,
                                              const std::string& backend, const std::vector<Tensor>& inputs,
                                              int threads, bool deterministic);

}  // namespace mosaic
