// Mosaic's library API, for programs that embed it (docs/api.md): everything the CLI does,
// as functions that return reports. Link with Mosaic::mosaic (find_package(Mosaic)).
//
//   mosaic::api::bench      compare backends on one model: per-node and per-stage figures
//                           (bench_processes: in K independent processes, samples pooled;
//                           find_max_batch: the largest batch that fits in memory)
//   mosaic::api::verify     ONNX test cases on backends against their expected outputs
//   mosaic::api::verify_per_node, verify_determinism   a model's nodes against naive; a training step's repeatability
//   mosaic::api::train      train on a dataset, with any backend or mixed placement
//   mosaic::api::gradcheck  analytic gradients against finite differences, per tensor
//   mosaic::api::info       a model at a batch: parameters, FLOPs, memory, which backends take each node
//   mosaic::api::history    the runs in the results store; compare: two bench runs, statistically
//   mosaic::api::plan       the placement, fallbacks and layout conversions a plan would have
//   mosaic::api::simulate   predicted data-parallel scaling from a training profile and a network
//   mosaic::api::optcheck   an optimizer against reference rules, ONNX data, convergence, a network
//   mosaic::api::sweep      a grid of training cells; html_report: one HTML page from runs
//   mosaic::load_plugin     operator/backend plugins (backends/plugin.hpp) before any of them
//
// Errors come back as Status (ir/status.hpp) naming the file, node or key; nothing exits
// the process, and nothing is printed unless an options struct's `verbose` asks.
#pragma once

#include "api/bench.hpp"
#include "api/bench_processes.hpp"
#include "api/gradcheck.hpp"
#include "api/history.hpp"
#include "api/info.hpp"
#include "api/max_batch.hpp"
#include "api/models.hpp"
#include "api/optcheck.hpp"
#include "api/html_report.hpp"
#include "api/plan.hpp"
#include "api/quantize.hpp"
#include "api/simulate.hpp"
#include "api/sweep.hpp"
#include "api/train.hpp"
#include "api/util.hpp"
#include "api/verify.hpp"
#include "api/verify_audits.hpp"
#include "backends/plugins.hpp"
#include "backends/registry.hpp"

namespace mosaic::api {

/// "0.1.0": the version of the Mosaic this program runs against.
const char* version();
/// The plugin interface version (MOSAIC_PLUGIN_API_VERSION) plugins must be built against.
int plugin_api_version();
/// Loads the plugins built with Mosaic (the torch backend) that add the given backends, or
/// all of them for {"all"}: the CLI does so itself when a command names their backend. An
/// embedding program calls it before it asks for such a backend. One that does not load is
/// registered as an unavailable backend with the loader's reason (load_bundled_plugin), so
/// that asking for it is refused with that reason.
Status load_bundled_backends(const std::vector<std::string>& backends);

}  // namespace mosaic::api
