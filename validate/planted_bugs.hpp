// Planted bugs, to measure what gradcheck (backward) and the per-node oracle check (forward)
// catch. Each bug registers a backend
// "<base>+<bug>" that runs <base>'s kernels, except that one op's backward is wrong in one
// specific way: a sign, a scale, a missing term, a transposed or shifted weight gradient,
// or a backward computed by <base>'s own kernel for a mutated node (a wrong dilation in
// convolution backward-data, a pooling window one element too large).
#pragma once

#include <string>
#include <vector>

#include "core/kernel.hpp"

namespace mosaic {

struct PlantedBug {
  std::string name;         ///< e.g. "conv-dx-sign"
  std::string op;           ///< op type whose backward it breaks
  std::string description;
  bool forward = false;     ///< the forward is wrong (the rest break only the backward)
};

/// Every bug, in a fixed order.
const std::vector<PlantedBug>& planted_bugs();

/// Registers backend "<base>+<bug>" in `registry` (which must already hold `base` and must
/// outlive the kernels it creates). Errors name an unknown base or bug.
Status register_planted_bug(KernelRegistry& registry, const std::string& base, const std::string& bug);

}  // namespace mosaic
