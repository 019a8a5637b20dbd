// Timing of a plan: warm-up, measured iterations in repeats, per-node kernel times from
// the executor's events, and derived statistics (median, min, GFLOP/s, overhead).
#pragma once

#include <string>
#include <vector>

#include "core/plan.hpp"

namespace mosaic {

struct BenchConfig {
  int warmup = 20;           ///< seed 001: 20 warm-up mini-batches
  int iterations = 100;      ///< ... then 100 measured
  int repeats = 1;           ///< runs averaged (seed 001 uses 3)
  double max_seconds = 60;   ///< time budget per configuration; iterations stop early past it
};

struct NodeStats {
  int step = 0;
  double median_ns = 0, min_ns = 0;
  double backward_median_ns = 0;  ///< training benchmarks
};

struct BenchResult {
  int warmup_done = 0;
  int measured = 0;
  bool budget_hit = false;
  std::vector<double> iteration_ns;        ///< wall time of each measured iteration
  std::vector<double> repeat_median_ns;    ///< per repeat
  std::vector<NodeStats> nodes;            ///< per executed (non-view) step
  double median_ns = 0, min_ns = 0;
  double kernel_sum_median_ns = 0;         ///< sum over nodes of their median time
  double overhead_per_node_ns = 0;         ///< (iteration - kernels) / executed nodes, median
  int executed_nodes = 0;
  double forward_ms = 0, backward_ms = 0, loss_ms = 0, optimizer_ms = 0;  ///< training: median per stage
};

class Optimizer;

/// A training step per iteration: forward, softmax cross-entropy on `labels`, backward and
/// an optimizer step, on a plan built for training.
Expected<BenchResult> run_training_benchmark(Plan& plan, const std::vector<Tensor>& inputs, const Tensor& labels,
                                             Optimizer& optimizer, const BenchConfig& config);

/// Runs `plan` on `inputs` as configured. Fails if any iteration fails.
Expected<BenchResult> run_benchmark(Plan& plan, const std::vector<Tensor>& inputs, const BenchConfig& config);

/// Median of a sample (copy).
double median(std::vector<double> v);

}  // namespace mosaic
