// Timing of a plan: warm-up, measured iterations in repeats (fixed, or adaptive until the
// median is known to a target precision), every per-iteration and per-node sample kept, and
// their statistics (metrics/stats.hpp). Definitions in docs/metrics.md.
#pragma once

#include <limits>
#include <functional>
#include <string>
#include <vector>

#include "core/plan.hpp"
#include "metrics/stats.hpp"
#include "metrics/trace.hpp"

namespace mosaic {

struct BenchConfig {
  int warmup = 20;           ///< seed 001: 20 warm-up mini-batches
  int iterations = 100;      ///< ... then 100 measured per repeat (fixed mode)
  int repeats = 1;           ///< repeats in this process (seed 001 uses 3)
  double max_seconds = 60;   ///< time budget per configuration; iterations stop early past it
  double min_seconds = 0;    ///< each repeat also lasts at least this long (-t)
  /// Adaptive mode when > 0: measure until the 95% CI of the median is within +-target_ci
  /// (a fraction, 0.02 = 2%) of the median, after at least kAdaptiveMinIterations and
  /// min_seconds, within the budget and at most max_iterations (0: no cap). One repeat.
  double target_ci = 0;
  int max_iterations = 0;
  std::string progress;  ///< label of the terminal progress line while measuring ("" = none)
  /// > 0: after measuring, this many pairs of iterations alternate metrics on (per-node
  /// events, CPU clocks) and off, to measure what the metrics cost (BenchResult::metrics_overhead).
  int overhead_pairs = 0;
  /// Whether to stop measuring (asked after each iteration); empty: interrupted() (SIGINT or
  /// SIGTERM). The ranks of a data-parallel run set one that agrees across them, so that all
  /// stop after the same iteration.
  std::function<bool()> should_stop;
};

/// Adaptive mode never stops before this many measured iterations.
inline constexpr int kAdaptiveMinIterations = 10;

struct NodeStats {
  int step = 0;
  std::vector<double> forward_ns, backward_ns;  ///< one sample per measured iteration
  SampleStats forward, backward;
};

struct BenchResult {
  int warmup_done = 0;
  int measured = 0;
  bool budget_hit = false;                 ///< the budget ended measuring before the plan did
  bool interrupted = false;                ///< SIGINT/SIGTERM stopped measuring (ir/interrupt.hpp)
  bool adaptive = false, converged = false;
  std::vector<double> iteration_ns;        ///< wall time of each measured iteration
  std::vector<int> repeat_of;              ///< repeat index of each measured iteration
  std::vector<double> repeat_median_ns;    ///< per repeat
  SampleStats iteration;                   ///< over all measured iterations
  std::vector<NodeStats> nodes;            ///< per executed (non-view) step
  double kernel_sum_median_ns = 0;         ///< sum over nodes of their median time
  /// Median over iterations of (time inside nodes [+ loss + optimizer in training]) / iteration
  /// time: how much of the measured iteration the per-node times account for.
  double node_coverage = 0;
  double overhead_per_node_ns = 0;         ///< (iteration - kernels) / executed nodes, median
  int executed_nodes = 0;
  double forward_ms = 0, backward_ms = 0, loss_ms = 0, optimizer_ms = 0;  ///< training: median per stage
  /// CPU time of the process (all threads) per wall second over the measuring loops (read
  /// at each repeat's start and end): cores kept busy (spin-waiting OpenMP threads count as
  /// busy; docs/metrics.md).
  double cpu_cores = 0;
  /// Share of the machine's CPU that other processes used over the same loops (0..1, negative
  /// if unknown); above kPeaksContended the run was contended and its times are inflated.
  double others_cpu = -1;
  /// Training: the same per stage (forward, loss, backward, optimizer), over kStageCpuSteps
  /// extra steps; empty in inference.
  std::vector<std::pair<std::string, double>> stage_cpu_cores;
  /// With overhead_pairs: median iteration time with metrics / without - 1 (NaN if not measured).
  double metrics_overhead = std::numeric_limits<double>::quiet_NaN();
  double metrics_on_ns = 0, metrics_off_ns = 0;  ///< the two medians
  int64_t gradient_bytes = 0;         ///< training: the parameters' gradient buffers
  int64_t optimizer_state_bytes = 0;  ///< training: the optimizer's per-parameter state
  /// The input bytes page-locked for the copies to a device while it was timed
  /// (Plan::pin_inputs; 0 where no device pins or no input goes straight to one).
  int64_t pinned_input_bytes = 0;
  /// Training: the bytes of the parameters a device reads and of their gradients,
  /// page-locked for their copies each step (Plan::pin_parameters).
  int64_t pinned_parameter_bytes = 0;
};

/// Training: per-stage CPU time is measured on this many extra steps after the timed ones
/// (reading the process CPU clock of a multi-threaded process can cost milliseconds, so it
/// is never read inside a timed iteration).
inline constexpr int kStageCpuSteps = 8;

/// Per-node times should account for the iteration within this fraction (docs/metrics.md).
inline constexpr double kNodeCoverageTolerance = 0.05;

class Optimizer;

/// A training step per iteration: forward, softmax cross-entropy on `labels`, backward and
/// an optimizer step, on a plan built for training.
/// `trace`, when given, records every measured node and stage (begin_config is the caller's).
Expected<BenchResult> run_training_benchmark(Plan& plan, const std::vector<Tensor>& inputs, const Tensor& labels,
                                             Optimizer& optimizer, const BenchConfig& config,
                                             TraceRecorder* trace = nullptr, GradientExchange* exchange = nullptr);

/// Runs `plan` on `inputs` as configured. Fails if any iteration fails.
Expected<BenchResult> run_benchmark(Plan& plan, const std::vector<Tensor>& inputs, const BenchConfig& config,
                                   TraceRecorder* trace = nullptr);

/// Median of a sample (copy).
double median(std::vector<double> v);

/// CPU time consumed so far by the whole process (every thread), in nanoseconds.
int64_t process_cpu_ns();

}  // namespace mosaic
