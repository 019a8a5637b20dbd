// If, Loop and Scan (operators/control_flow.hpp): their subgraphs prepared with the node's
// input descriptors (outer-scope constants bound as initializers, so shapes that depend on
// them fold), and kernels that run each subgraph through a plan of its own on the naive
// oracle. Mosaic plans static shapes: If's branches must agree, and Loop's scan outputs
// need a trip count known at load (a loop that stops early is an error, not a short output).
#pragma once

#include "core/registration.hpp"
#include "core/prepare.hpp"

namespace mosaic {

/// While alive, nodes with subgraphs infer their outputs by preparing their subgraphs with
/// `registry` and `options` (prepare_graph holds one; they nest).
class SubgraphScope {
 public:
  SubgraphScope(const KernelRegistry& registry, const PrepareOptions& options);
  ~SubgraphScope();
  SubgraphScope(const SubgraphScope&) = delete;
  SubgraphScope& operator=(const SubgraphScope&) = delete;

  const KernelRegistry& registry;
  const PrepareOptions& options;

 private:
  const SubgraphScope* previous_;
};

/// If, Loop and Scan kernels for a backend (the naive oracle registers them): their plans
/// are built with `r`'s registry, all on that backend.
void add_control_flow_kernels(BackendRegistration& r);

}  // namespace mosaic
