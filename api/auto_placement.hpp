// `--assign auto`: Mosaic chooses a backend per node by measurement.
//
// 1. Every candidate backend (the registry's, without the naive oracle) runs the whole
//    graph on its own; each node's median time on it is its cost there: forward in
//    inference, forward plus backward in training (a node the backend declines costs
//    infinity there).
// 2. A value crossing from one backend to another costs a conversion where either backend
//    keeps it in its own layout (oneDNN's blocked layouts): a reorder, read and written
//    once, at the machine's measured memory bandwidth, and in training once more for the
//    value's gradient on its way back. Plain buffers are shared for free. A value crossing
//    to or from a device (the cuda backend's GPU) costs the copy the planner would insert,
//    at the rate that device's copies ran when its backend was measured alone, as does a
//    graph input a device node reads and a graph output it makes (charged per consuming
//    node: a value two device nodes read counts twice).
// 3. The assignment minimising the sum of node and conversion costs is found by dynamic
//    programming over the nodes in topological order with the backend of the previous node
//    as the state: exact on chains, where every edge joins consecutive nodes. Where the
//    graph branches, edges that skip nodes are charged by a refinement pass afterwards
//    (coordinate descent on the full cost, every edge charged: a local optimum).
// 4. A choice that moves nodes off the fastest single backend is kept only if it measures
//    faster than that backend alone, in alternating rounds side by side; otherwise auto is
//    that backend alone (so auto is never slower than the best single backend, up to the
//    noise of this check).
// 5. The choice is cached per model, batch, machine and backend set
//    (cache_dir()/auto_placement.json), so a second run does not measure again.
// bench then measures the chosen placement next to every single-backend plan, side by
// side in one run.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "core/kernel.hpp"
#include "core/plan.hpp"
#include "metrics/benchmark.hpp"

namespace mosaic::api {

struct AutoPlacement {
  Placement placement;                         ///< per node (by name), fallback as given
  std::map<std::string, std::string> node_backend;  ///< the choice, by node name (fused: "a+b")
  std::vector<std::string> candidates;
  double predicted_ms = 0;                     ///< the cost model's time of the choice
  std::map<std::string, double> single_ms;     ///< measured iteration time of each candidate alone
  std::string best_single;                     ///< the fastest candidate alone
  /// Nodes placed elsewhere than on best_single: "conv3+relu3 on torch (0.41 ms vs 0.52 ms)".
  std::vector<std::string> differences;
  /// The cost model's moves when they did not beat best_single measured side by side (then
  /// the placement is best_single alone), and the two medians of that check.
  std::vector<std::string> rejected;
  double checked_mixed_ms = 0, checked_single_ms = 0;
  /// Every candidate's median over the check's alternating rounds; best_single is the
  /// fastest of them. `sequential_best` names the candidate the one-after-another
  /// measurement found fastest when the rounds disagreed (empty otherwise).
  std::map<std::string, double> checked_singles_ms;
  std::string sequential_best;
  bool cached = false;
};

/// The search's input: node i on backend b costs node[i][b] (ns; infinity where b cannot
/// run it); an edge costs cost[bu][bv] for its producer on bu and consumer on bv.
struct PlacementProblem {
  std::vector<std::vector<double>> node;
  struct Edge {
    size_t from = 0, to = 0;  ///< node indices, from < to (topological order)
    std::vector<std::vector<double>> cost;
  };
  std::vector<Edge> edges;
  double total(const std::vector<size_t>& assignment) const;
};

/// A backend per node: dynamic programming over the nodes in order with the edges between
/// consecutive nodes (optimal on a chain), then single-node moves while the full cost drops.
std::vector<size_t> solve_placement(const PlacementProblem& problem);

/// How the candidates are timed: the plan options (training or inference) and one timed run
/// of a plan (inference: run_benchmark; training: run_training_benchmark with an optimizer).
struct AutoTiming {
  PlanOptions plan_options;
  std::function<Expected<BenchResult>(Plan&, const BenchConfig&)> run;
  /// Seconds the whole choice may spend measuring: half for the candidates alone, half for the
  /// alternating check (each timing loop stops at its share; --auto-budget).
  double budget_seconds = 120;
  /// Told what is measured next (the CLI prints it): a choice takes minutes on a big model.
  std::function<void(const std::string&)> say;
};

/// Measures (or reads from the cache under `cache_key`) and chooses. `timed` is the graph
/// bench times (fused); `bandwidth_gbs` prices conversions.
Expected<AutoPlacement> choose_auto_placement(const Graph& timed, const KernelRegistry& registry,
                                              const AutoTiming& timing,
                                              const std::vector<std::string>& fallback, double bandwidth_gbs,
                                              const std::string& cache_key, bool remeasure);

/// The placement of a per-node choice: each node by its name (a fused node by its first
/// part, as Placement::backend_for finds it).
Expected<Placement> placement_of(const std::map<std::string, std::string>& node_backend, const std::string& default_backend,
                                 const std::vector<std::string>& fallback, const KernelRegistry& registry);

}  // namespace mosaic::api
