// A placement (--assign) from a YAML file:
//
//   default: onednn            # every node not matched below (optional; naive if absent)
//   ops:                       # per op type
//     Gemm: im2col
//   nodes:                     # per node name or name glob (* ? [...]), first match wins
//     "/features/features.0/*": naive
//     fc2: im2col
//   fallback: [im2col, naive]  # backends tried in order when a node's cannot run it
//                              # ([] forbids fallback; absent: the command's --fallback)
#pragma once

#include <string>

#include "core/kernel.hpp"
#include "core/plan.hpp"

namespace mosaic {

/// Reads a placement file; `has_fallback` tells whether it set `fallback`. Errors name the
/// file and the key: not YAML, an unknown key, an unknown backend or op type, a value of
/// the wrong type, nothing assigned.
Expected<Placement> load_placement_file(const std::string& path, const KernelRegistry& registry, bool* has_fallback);

/// Whether an --assign value names a placement file rather than a spec (it ends in .yaml
/// or .yml).
bool is_placement_file(const std::string& assign);

}  // namespace mosaic
