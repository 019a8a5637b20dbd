// A double-precision forward pass of a prepared graph: the numeric side of gradcheck.
//
// Each op's mathematics is written once more here, plainly and in double, independently of
// every backend (the naive oracle included), so that finite differences see rounding of
// ~1e-16 instead of float's ~1e-7 and can use steps small enough to stay off kinks. Ops
// without a double implementation run on the naive backend's float kernel, and are listed
// (float_nodes) so a report can say where the precision is lower.
//
// Every run also records, for each piecewise node (Relu, LeakyRelu, Clip, max pooling, an
// activation fused into Conv/Gemm), which branch every element took: its region for the
// element-wise ops, the position of the window's maximum for pooling. Two runs took the
// same smooth piece of the function exactly when their records are equal.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "core/kernel.hpp"
#include "ir/status.hpp"

namespace mosaic {

/// A plain row-major double tensor.
struct DTensor {
  Shape shape;
  std::vector<double> v;
  int64_t numel() const { return static_cast<int64_t>(v.size()); }
};

/// The branch every element of every piecewise node took in one run.
struct BranchRecord {
  std::vector<int> nodes;                  ///< graph node index of each entry
  std::vector<std::vector<int32_t>> codes; ///< one code per element
  /// Decisions that float arithmetic may take either way: a max-pool window whose two
  /// largest values differ by less than 2^-16 of the larger (the optimised backends route
  /// near-ties below 2^-18 to the first maximum), an activation input within 2^-16 of its
  /// node's RMS of a kink. The backend's gradient may follow the other branch there.
  int64_t ambiguous = 0;
};

/// Elements whose branch differs between two runs of the same evaluator (0: same piece).
int64_t branch_changes(const BranchRecord& a, const BranchRecord& b);

/// One of the ambiguous decisions BranchRecord::ambiguous counts: which of a max-pool
/// window's near-tied cells is its maximum, or which side of its kink an activation input
/// is on. Either option is a legitimate float result, and each is a smooth function near
/// the base point: the value of one window cell, or one side's formula.
struct Ambiguity {
  int step = -1;         ///< graph node index
  int64_t element = 0;   ///< the node's output element
  double value = 0;      ///< its value in the run that found it
  /// How close to a tie or kink counts as ambiguous here: 2^-16 of the window's maximum, or
  /// of the RMS of the activation's inputs. The options' values lie within it, so it is
  /// the scale at which the loss's slope in this element is measured (`value` is ~0 for an
  /// activation at its kink).
  double band = 0;
  /// Max pooling: the window's cells within 2^-16 of its maximum (offsets within the
  /// plane that starts at input element `plane`), one option each. Empty for an
  /// activation, whose options are the pieces above (0) and below (1) its kink.
  std::vector<int64_t> cells;
  int64_t plane = 0;
  double kink = 0;
  int kink_index = 0;    ///< which kink of the op's row (operators/eltwise.hpp)
  int exact = 0;         ///< the option exact arithmetic takes at the base point
  std::string where;     ///< "'pool1' (MaxPool) output [1234]"
  int options() const { return cells.empty() ? 2 : static_cast<int>(cells.size()); }
  /// "window cell at offset 18 (exact arithmetic: offset 19)", "the piece above its kink (as in
  /// exact arithmetic)".
  std::string option_name(int option) const;
};

class ReferenceForward {
 public:
  /// `graph` must be prepared (static shapes, inferred value descriptors). In `training`
  /// mode BatchNormalization uses batch statistics, as training plans do; Dropout is
  /// refused (it is not a deterministic function). `registry` supplies naive kernels for
  /// ops without a double implementation.
  static Expected<std::unique_ptr<ReferenceForward>> create(const Graph& graph, const KernelRegistry& registry,
                                                            bool training);
  ~ReferenceForward();

  /// A float initializer's values in double, to perturb in place between runs; nullptr if
  /// `name` is not one.
  std::vector<double>* parameter(const std::string& name);
  /// Graph input i's values in double (set before run; perturb in place).
  std::vector<double>& input(size_t i);
  /// Runs the graph on the current inputs and parameters.
  Status run();
  /// Runs only the nodes downstream of `changed` (parameter or input names): the other
  /// values are those of the previous run. After perturbing one tensor between runs, call
  /// it once more with the tensor restored to leave every value consistent again.
  Status run_from(const std::vector<std::string>& changed);
  const DTensor& output(size_t i) const;
  const BranchRecord& branches() const { return branches_; }
  /// The ambiguous decisions of the current values, in node order.
  std::vector<Ambiguity> ambiguities() const;
  /// Follows `decisions` in every later run: alternatives()[d][o] is how far option o's
  /// value of decision d lies from the value computed (0 for the option taken), and a
  /// tracked element whose branch stays among its options no longer counts as a branch
  /// change. Run once after tracking so the record and alternatives are current.
  void track(std::vector<Ambiguity> decisions);
  const std::vector<std::vector<double>>& alternatives() const;
  /// Sets tracked decision d's output element to its value before the first nudge plus
  /// `delta`, and runs what depends on it: the outputs are then those of the nudged
  /// function. nudge(d, 0) makes every value consistent again.
  Status nudge(size_t d, double delta);
  /// "name (Op)" of the nodes evaluated in float by the naive backend.
  const std::vector<std::string>& float_nodes() const { return float_nodes_; }

 private:
  struct Impl;
  ReferenceForward() = default;
  std::unique_ptr<Impl> impl_;
  BranchRecord branches_;
  std::vector<std::string> float_nodes_;
};

}  // namespace mosaic
