// Nodes whose output shapes depend on their input values (NonZero, NonMaxSuppression, an If
// whose branches give different shapes, a Range or Reshape fed at run time). Mosaic's plans
// have static shapes, so such a graph is planned from given input values: prepare_graph
// (PrepareOptions::specialise) folds a copy of the graph on those values, takes each such
// node's output descriptors from it and marks the node; the planner then runs the node on
// the oracle, evaluated each run as a fold of the node on its run-time inputs, and fails the
// run, naming the node and both shapes, where its outputs no longer have the planned shapes.
// The rest of the plan runs on the backends asked for, with the shapes that follow.
#pragma once

#include <memory>
#include <string>

#include "core/kernel.hpp"

namespace mosaic {

/// The attribute prepare_graph sets on a node it planned from given inputs' values.
inline constexpr const char* kRunTimeShapeAttr = "mosaic.run_time_shape";
/// The backend that evaluates those nodes (the oracle, which folds constants).
inline constexpr const char* kRunTimeShapeBackend = "naive";

bool has_run_time_shape(const Node& node);

/// The kernel of a marked node: each run folds the node on `registry`'s `backend` with the
/// run's inputs as constants, checks every output's type and shape against ctx.outputs, and
/// copies the values out.
Expected<std::unique_ptr<Kernel>> make_run_time_shape_kernel(const KernelContext& ctx, const KernelRegistry& registry,
                                                             const std::string& backend);

}  // namespace mosaic
