// Numerical gradient checking of a graph (Caffe's GradientChecker, for graphs).
//
// A scalar loss of the outputs (cross-entropy against random labels, or a random
// projection); every trainable parameter and graph input is probed along the analytic
// gradient, random unit directions and single elements. The analytic side is the checked
// backend's backward, in float. The numeric side is a central difference of a
// double-precision reference forward (validate/reference_forward.hpp), so rounding does not
// limit the step. A step is used only if neither +h nor -h changes any piecewise node's
// branch (a ReLU's sign, a max-pool's argmax, ...): the step is halved until none changes,
// and two consecutive clean steps must agree (their Richardson extrapolation is the
// estimate). A probe that no step makes clean and stable is not judged.
//
// Verdicts per tensor: PASS (at least `min_probes` probes judged, all within tolerance),
// FAIL (a judged probe is off), INCONCLUSIVE (too few probes could be judged; never a pass).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "core/kernel.hpp"
#include "core/plan.hpp"

namespace mosaic {

enum class GradcheckLoss {
  kCrossEntropy,  ///< softmax cross-entropy of output 0 ([N, C]) against random labels
  kProjection,    ///< sum over outputs of <y, r> with fixed random r: any output shapes
};

class GradcheckMemo;

struct GradcheckOptions {
  GradcheckLoss loss = GradcheckLoss::kCrossEntropy;
  double eps = 1e-3;        ///< largest finite-difference step (the probe direction has unit norm)
  int halvings = 12;        ///< the step is halved at most this often to get off kinks
  /// Max |numeric - analytic| / max(|numeric|, |analytic|, |tensor gradient|, floor). A
  /// gradient off by 1% fails; float rounding of a correct backward is ~1e-5. The floor is
  /// `scale`, 1e-6 of the model's largest tensor gradient norm, and 1e-3 of the largest among
  /// tensors taken by the same nodes (gradcheck.cpp explains why).
  double tolerance = 2e-3;
  double scale = 1e-7;      ///< absolute floor of the error denominator (all-zero gradients)
  int directions = 3;       ///< random unit directions per tensor
  int elements = 4;         ///< random single elements per tensor (all if the tensor is smaller)
  int min_probes = 2;       ///< judged probes a PASS needs (fewer if the tensor has fewer probes)
  int input_draws = 8;      ///< inputs drawn at most, until no branch decision is ambiguous
  uint64_t seed = 1;
  bool check_input = true;  ///< also check the gradients w.r.t. every graph input
  float input_lo = 0.f, input_hi = 1.f;  ///< inputs are drawn uniformly from [lo, hi]
  /// Called before each tensor is probed (index, count, name): the CLI's progress line.
  std::function<void(size_t, size_t, const std::string&)> on_tensor;
  /// Reference evaluations shared with other runs of the same check on other placements
  /// (null: none). The verdicts are those of a run without it.
  GradcheckMemo* memo = nullptr;
};

/// The reference evaluations of gradcheck runs of one model, seed and options on several
/// placements (`gradcheck --backend a,b,c`). The double-precision reference does not depend
/// on the backend, and neither do a tensor's probes except the first (along the backend's
/// own gradient): a later run reuses the f(+h), f(-h) earlier runs computed for the random
/// directions and single elements, about 7 of every 8 probes. Runs identify the check by a
/// fingerprint of the model, the options, the base point's inputs and labels, and its
/// ambiguous decisions; a run whose fingerprint differs starts the memo afresh.
class GradcheckMemo {
 public:
  struct Pair {
    std::vector<double> plus, minus;  ///< per combination of the ambiguous decisions' options
    int64_t switches = 0;
  };
  /// Starts a run: keeps the entries if `fingerprint` is the memo's, else drops them.
  void begin(const std::string& fingerprint);
  const Pair* find(const std::string& key);
  void put(const std::string& key, Pair pair);
  int64_t hits() const { return hits_; }      ///< evaluations pairs reused
  int64_t misses() const { return misses_; }  ///< looked up and not there

 private:
  std::string fingerprint_;
  std::map<std::string, Pair> pairs_;
  int64_t hits_ = 0, misses_ = 0;
};

/// The double-precision reference loss is trusted to this many ulps of its magnitude: the
/// rounding accumulated over the forward pass (gradcheck.cpp, the resolution of a step).
inline constexpr double kLossUlps = 16;

/// Combinations of options of the base point's ambiguous decisions gradcheck tries at most
/// (eight two-way decisions; the input draws usually leave none or a few).
inline constexpr int64_t kMaxOptionCombinations = 256;

enum class ProbeOutcome {
  kJudged,    ///< a clean, stable estimate was compared with the analytic value
  kKink,      ///< every step tried switched some piecewise node's branch
  kUnstable,  ///< clean steps were found, but no two consecutive ones agreed, or the only
              ///< clean steps were too small to resolve the tolerance above the loss's rounding
};

struct ProbeResult {
  std::string what;         ///< "gradient direction", "direction 2" or "element [3]"
  ProbeOutcome outcome = ProbeOutcome::kJudged;
  double analytic = 0, numeric = 0, error = 0;
  double step = 0;          ///< the step of the estimate (judged probes)
  int64_t switches = 0;     ///< branch switches at the largest step
  /// Judged only on the tensor's floor: on the tensor's own scale (max(|numeric|, its
  /// gradient norm)) the step did not resolve the estimate, or the error exceeds the
  /// tolerance. Such a probe can FAIL but cannot make a PASS: below the floor a wrong sign
  /// or scale does not show.
  bool at_floor = false;
};

enum class Verdict { kPass, kFail, kInconclusive };
const char* verdict_name(Verdict v);

struct TensorVerdict {
  std::string name;         ///< parameter name or "input:NAME"
  Verdict verdict = Verdict::kPass;
  int checked = 0;          ///< judged probes
  int kinks = 0;            ///< probes no step could keep off a kink
  int unstable = 0;         ///< probes without a stable estimate
  int at_floor = 0;         ///< judged probes that agreed only on the floor (counted in `checked`)
  double gradient_norm = 0; ///< the analytic gradient's norm
  double floor = 0;         ///< the error floor (docs/gradcheck.md, "Error")
  ProbeResult worst;        ///< the judged probe with the largest error
  std::string reason;       ///< why INCONCLUSIVE
  bool passed() const { return verdict == Verdict::kPass; }
};

struct GradcheckReport {
  std::string backend;
  std::vector<TensorVerdict> tensors;
  /// Nodes that did not run on the backend the placement asked for ("'name' (Op) on
  /// naive: reason"): their backward is another backend's.
  std::vector<std::string> fallback_nodes;
  /// Nodes the reference forward evaluated in float (no double implementation).
  std::vector<std::string> float_reference_nodes;
  int input_draws = 1;                  ///< inputs drawn to get a base point without ambiguity
  int64_t ambiguous = 0;                ///< ambiguous branch decisions left at the base point
  /// How each of them was resolved ("'pool1' (MaxPool) output [7]: window cell at offset
  /// 3"): the options whose numeric derivatives fit the backend's gradient best (it took
  /// one of them), judged together over every tensor. Empty when nothing was ambiguous.
  std::vector<std::string> resolved;
  /// More ambiguous decisions than gradcheck resolves (kMaxOptionCombinations): a FAIL
  /// could be one of them taken the other way, and is reported INCONCLUSIVE.
  bool unresolved = false;
  std::string unresolved_reason;  ///< why ("more than 256 combinations of options", ...)
  double loss = 0, reference_loss = 0;  ///< the backend's (float) and the reference's (double)
  /// Largest |backend output - reference output| over the output's largest |reference|.
  double forward_error = 0;
  /// The backend's loss agrees with the reference's to 1e-3 relative and forward_error <= 1e-3.
  bool forward_ok = true;
  int count(Verdict v) const;
  /// Every tensor passed and the forward agreed.
  bool passed() const;
};

/// Checks `graph` (prepared, static shapes) placed by `placement` on `registry`. The backend
/// checked is placement.default_backend.
Expected<GradcheckReport> gradcheck(const Graph& graph, const KernelRegistry& registry, const Placement& placement,
                                    const GradcheckOptions& options);

}  // namespace mosaic
