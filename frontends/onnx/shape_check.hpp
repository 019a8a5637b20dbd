// An outside check of Mosaic's shape inference: the onnx library's own (an independent
// implementation, the one ONNX Runtime's and onnx's checkers use) on the model file, with its
// inputs bound to the shapes Mosaic prepared. The naive oracle shares Mosaic's loader, folding
// and shape inference with every backend, so a bug there gives every backend the same wrong
// shape and a check against naive passes it (docs/conformance.md); this check does not.
#pragma once

#include <string>

#include "ir/graph.hpp"
#include "ir/status.hpp"

namespace mosaic {

struct ShapeCheck {
  int compared = 0;  ///< values both inferred fully (static shapes) and compared
  int skipped = 0;   ///< values ONNX left (partly) unknown: custom domains, data-dependent shapes
};

/// Runs ONNX's shape inference (with data propagation) on the model at `path` whose graph
/// inputs are bound to `prepared`'s input shapes, and compares every value it infers fully
/// with Mosaic's (prepared.value_descs). A value whose shapes differ is an error naming the
/// node that produces it, both shapes and the file. A model ONNX cannot read or infer at all
/// is not an error (checked.compared is then 0): Mosaic's own loader has already accepted it.
Expected<ShapeCheck> check_shapes_against_onnx(const std::string& path, const Graph& prepared);

}  // namespace mosaic
