// plan as a library function: the placement a plan would run with, before anything is timed:
// which backend runs each node (and which it asked for), every fallback with its reason, every
// layout a backend keeps between nodes, and every conversion the planner inserts (with the
// bytes it moves). Nothing is allocated, so any batch works. `mosaic plan` prints the report.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/models.hpp"
#include "ir/status.hpp"

namespace mosaic::api {

struct PlanQuery {
  CommonOptions common;
  std::string model;
  std::string backend = "naive";  ///< every node asks for this one (unless `assign`)
  std::string assign;             ///< a mixed placement, as bench's
  std::vector<std::string> fallback = {"naive"};  ///< "none" for no fallback
  std::string mode = "inference";  ///< or "training" (fusion folds only the padding)
  bool fuse = true;
};

struct PlanStepReport {
  std::string node, op, requested, backend;
  Shape output_shape;
  std::string output_layout;    ///< "plain" or "backend:layout"
  std::string fallback_reason;  ///< why it runs elsewhere than requested ("" if it does not)
  std::string widened_from;     ///< PlanStep::widened_from ("float16": computed in float32, converted around)
  std::string output_device = "host";  ///< where the output lives: "host" or a Device::name
  bool conversion = false;      ///< a layout-to-plain step or a device copy the planner inserted
  std::string converted_value;  ///< conversions: the value converted ...
  std::string from_layout;      ///< ... its layout
  std::string from_device;      ///< ... and where it was ("host" or a Device::name)
  size_t bytes_read = 0, bytes_written = 0;  ///< conversions: bytes moved per run
  bool fell_back() const { return !fallback_reason.empty(); }
};

struct PlanReport {
  std::string model, mode, placement;  ///< the placement in spec syntax
  std::vector<std::string> fallback;
  int64_t batch = 1;
  std::vector<std::string> notes;  ///< what loading and preparing said
  std::vector<std::string> fused;  ///< the fused nodes' names
  std::vector<std::string> reordered;  ///< training: "pool1 before relu1" (FuseReport::reordered)
  std::vector<PlanStepReport> steps;
  std::map<std::string, int> nodes_per_backend;  ///< conversions not counted
  int conversions = 0, fallbacks = 0;
  size_t conversion_bytes = 0;
};

/// Builds the plan `q` describes without allocating it. Errors: a mode other than inference
/// or training, an unknown backend or fallback, a bad placement or node name, a model that
/// does not load, a node no backend can run.
Expected<PlanReport> plan(const PlanQuery& q);

/// The report as JSON (schema mosaic.plan/1, docs/json-schema.md).
nlohmann::json plan_json(const PlanReport& r);

}  // namespace mosaic::api
