// Graph optimisation applied at plan time (not to the naive reference): exact rewrites that
// remove memory passes frameworks spend on separate small ops.
//  - Pad(constant 0, spatial) -> Conv: the padding is folded into the Conv's pads.
//  - Conv/Gemm -> Relu | LeakyRelu | Clip(constant bounds): the activation is fused into the
//    producer as the internal attribute "mosaic.activation" (and "mosaic.alpha",
//    "mosaic.min", "mosaic.max"). Every backend applies it in the producer's epilogue.
// A rewrite happens only when the intermediate value has one consumer and is not a graph
// output. Fused nodes are named "a+b" so reports show what was merged.
#pragma once

#include <string>
#include <vector>

#include "core/graph.hpp"

namespace mosaic {

struct FuseReport {
  std::vector<std::string> fused;  ///< names of the fused nodes, e.g. "conv1+relu1"
};

struct FuseOptions {
  /// Fuse activations into Conv/Gemm. Training plans fold only the padding: their kernels
  /// have no backward for a fused activation.
  bool activations = true;
};

/// Rewrites a prepared graph (value_descs filled) in place.
FuseReport fuse_graph(Graph& graph, const FuseOptions& options = {});

}  // namespace mosaic
