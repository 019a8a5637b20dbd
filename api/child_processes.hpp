// Children of the mosaic program, one after another, each writing a JSON report: what
// `bench --processes K` and `generate --processes K` are made of (fresh address space, page
// cache, thread pools and heap layout per process; docs/metrics.md#comparing-runs).
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/status.hpp"

namespace mosaic::api {

struct ChildReports {
  std::vector<nlohmann::json> reports;  ///< each finished child's report, in order
  std::vector<int> exit_codes;          ///< 0 or 1 (a check failed) per report
  bool interrupted = false;             ///< a stop request (ir/interrupt.hpp) ended the series early
};

/// The arguments (argv[0] "mosaic" first) of one child that writes its report to the path given.
using ChildArguments = std::function<Expected<std::vector<std::string>>(const std::string& json_path)>;

/// A number as a child's argument: the shortest form that reads back as the same double
/// ("0.01", not "0.01000000000000000021").
std::string argument_number(double v);

/// Runs `count` (>= 1) children of this mosaic program one after another. A child that fails
/// (an exit code other than 0 or 1, or no JSON report) is an error quoting its log; a stop
/// request stops the running child (it gets the signal) and starts no other: what finished is
/// returned, or, if nothing did, an error says so. `progress` gets "process 2/3..." lines when
/// not null.
Expected<ChildReports> run_child_reports(int count, const ChildArguments& arguments, std::ostream* progress);

}  // namespace mosaic::api
