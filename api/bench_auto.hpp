// `bench --assign auto`, around the search of auto_placement.hpp: the configurations it adds
// to a bench run, and the side-by-side verdict after timing. Inference and training alike:
// the caller says how a plan is timed (AutoTiming).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/auto_placement.hpp"
#include "api/bench.hpp"
#include "metrics/report.hpp"

namespace mosaic::api {

/// --assign auto measures and times in one process: with --find-max-batch, --processes or
/// --distributed it is refused (before any work).
Status check_auto_options(const BenchOptions& o);

/// Chooses the placement of `timed` (the graph bench times, fused as bench fuses it) and
/// appends every candidate backend alone and then "auto" to `configs`; notes the choice in
/// the report (notes and JSON auto_placement). The choice is cached per model, batch, mode,
/// machine and backend set.
Status add_auto_configs(const BenchOptions& o, const Graph& timed, const AutoTiming& timing,
                        const std::vector<std::string>& fallback, BenchReport& report, BenchConfigs& configs);

/// After every configuration was timed: the auto plan and the fastest single backend timed
/// in 5 alternating rounds, so that drift of the machine hits both alike. The median of the
/// per-round ratios, and their range (the noise it is judged against), go in the notes and
/// the JSON. `plans[i]` is the plan of `configs[i]`.
Status auto_side_by_side(const BenchOptions& o, const BenchConfigs& configs,
                         const std::vector<std::unique_ptr<Plan>>& plans, const AutoTiming& timing, BenchReport& report);

}  // namespace mosaic::api
