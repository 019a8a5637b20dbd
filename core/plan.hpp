// Placement (which backend runs which node), the Plan (kernels + statically planned
// memory), and its executor.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/events.hpp"
#include "core/graph.hpp"
#include "core/kernel.hpp"

namespace mosaic {

/// Which backend each node asks for, and where to go when it cannot run there.
/// Spec syntax: comma-separated `KEY=BACKEND`, KEY being an op type (`Conv`), a node
/// name prefixed with `@` (`@conv1`), or `*` for every other node.
struct Placement {
  std::string default_backend = "naive";
  std::map<std::string, std::string> by_op;
  std::map<std::string, std::string> by_name;
  std::vector<std::string> fallback = {"naive"};  ///< tried in order after the requested backend

  static Expected<Placement> parse(const std::string& spec, const KernelRegistry& registry);
  static Placement all_on(const std::string& backend, std::vector<std::string> fallback = {"naive"});
  const std::string& backend_for(const Node& node) const;
  std::string str() const;
};

/// A value slot of the plan: a graph input, constant or intermediate.
struct PlanValue {
  std::string name;
  TensorDesc desc;
  Tensor tensor;        ///< bound once at build time (constants, planned buffers, views)
  bool is_const = false;
  bool is_input = false;
  int storage = -1;     ///< index into the plan's storage list (-1: constant)
};

struct PlanStep {
  int node = 0;                  ///< index into graph().nodes
  std::string backend;           ///< backend that runs it
  std::string requested;         ///< backend placement asked for
  std::string fallback_reason;   ///< why `requested` could not run it (empty if it did)
  std::unique_ptr<Kernel> kernel;
  std::vector<int> in, out;      ///< value indices (-1: omitted)
  std::vector<const Tensor*> src;
  std::vector<Tensor*> dst;
  double flops = 0;
  size_t out_bytes = 0;
  bool alias = false;
  bool conversion = false;       ///< a layout conversion the planner inserted
  int64_t create_ns = 0;
  bool fell_back() const { return !fallback_reason.empty(); }
};

class Plan {
 public:
  /// Creates a kernel for every node (create stage) and plans activation memory.
  static Expected<std::unique_ptr<Plan>> build(const Graph& graph, const Placement& placement,
                                               const KernelRegistry& registry);

  /// Runs one forward pass. `inputs` follow graph().inputs; outputs follow graph().outputs.
  Status run(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs, ExecObserver* observer = nullptr,
             int64_t iteration = 0);

  const Graph& graph() const { return graph_; }
  const std::vector<PlanStep>& steps() const { return steps_; }
  const std::vector<PlanValue>& values() const { return values_; }
  const Placement& placement() const { return placement_; }
  const Node& node(const PlanStep& s) const { return graph_.nodes[s.node]; }

  MemoryTracker& tracker() { return tracker_; }
  int64_t weight_bytes() const { return weight_bytes_; }
  int64_t activation_bytes() const { return activation_bytes_; }
  int64_t workspace_bytes() const;
  int fallback_count() const;
  int conversion_count() const;

 private:
  Graph graph_;
  Placement placement_;
  std::vector<PlanValue> values_;
  std::vector<PlanStep> steps_;
  std::vector<std::shared_ptr<Buffer>> storage_;
  std::vector<int> input_values_, output_values_;
  MemoryTracker tracker_;
  int64_t weight_bytes_ = 0, activation_bytes_ = 0;
};

}  // namespace mosaic
