// Numerical gradient checking of a graph (Caffe's GradientChecker, for graphs): a scalar
// loss of the outputs (cross-entropy against random labels, or a random projection), and
// every trainable parameter and graph input checked against central finite differences.
#pragma once

#include <string>
#include <vector>

#include "core/graph.hpp"
#include "core/kernel.hpp"
#include "core/plan.hpp"

namespace mosaic {

enum class GradcheckLoss {
  kCrossEntropy,  ///< softmax cross-entropy of output 0 ([N, C]) against random labels
  kProjection,    ///< sum over outputs of <y, r> with fixed random r: any output shapes
};

struct GradcheckOptions {
  GradcheckLoss loss = GradcheckLoss::kCrossEntropy;
  double eps = 1e-3;        ///< finite-difference step (relative to a unit-norm probe)
  double tolerance = 2e-2;  ///< max |fd - analytic| / max(|fd|, |analytic|, |gradient|, scale)
  double scale = 1e-6;      ///< absolute floor of the error denominator (for all-zero gradients)
  int directions = 3;       ///< random unit directions per tensor
  int elements = 4;         ///< random single elements per tensor (all if the tensor is smaller)
  uint64_t seed = 1;
  bool check_input = true;  ///< also check the gradients w.r.t. every graph input
  float input_lo = 0.f, input_hi = 1.f;  ///< inputs are drawn uniformly from [lo, hi]
};

struct ProbeResult {
  std::string what;         ///< "direction 2" or "element [3]"
  double analytic = 0, numeric = 0, error = 0;
  bool kink = false;        ///< step sizes disagree: a ReLU or max-pool kink; not judged
};

struct TensorVerdict {
  std::string name;         ///< parameter name or "input:NAME"
  bool passed = true;
  int checked = 0, skipped_kinks = 0;
  ProbeResult worst;        ///< the probe with the largest error
};

struct GradcheckReport {
  std::vector<TensorVerdict> tensors;
  bool passed() const;
};

/// Checks `graph` (prepared, static shapes) placed by `placement` on `registry`.
Expected<GradcheckReport> gradcheck(const Graph& graph, const KernelRegistry& registry, const Placement& placement,
                                    const GradcheckOptions& options);

}  // namespace mosaic
