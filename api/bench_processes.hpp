// bench in K independent processes (fresh address space, page cache, thread pools, heap
// layout), combined: samples pooled, statistics recomputed, per-process throughput kept. The
// "x3" of seed 001's tables is three processes, not three loops in one. Each process is a child
// `mosaic bench` (api::mosaic_executable) running what the options describe.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/bench.hpp"

namespace mosaic::api {

/// The arguments (argv[0] "mosaic" first) of a child `mosaic bench` that runs what `o`
/// describes, records nothing and writes its report to `json_path`; loaded plugin files go
/// along. Errors: options a child cannot take (find_max_batch, distributed, trace, csv).
Expected<std::vector<std::string>> bench_child_arguments(const BenchOptions& o, const std::string& json_path);

struct ProcessesOutcome {
  /// The first process's mosaic.bench/2 report with every run's samples pooled over the
  /// processes, statistics recomputed, "processes": per process and configuration its
  /// throughput, medians and check, "config.processes", and this run's provenance.
  nlohmann::json pooled;
  Provenance provenance;     ///< this run's, as in `pooled` ("reproduce:" lines come from it)
  int finished = 0;          ///< processes whose report was pooled
  bool checks_ok = true;     ///< every process's every configuration matched naive
  bool interrupted = false;  ///< a stop request (ir/interrupt.hpp) ended the series early
};

/// Runs o.processes (>= 1) children one after another. A child that fails (exit code other than
/// 0 or 1, or no report) is an error quoting its output; a stop request stops the running child
/// (it gets the signal) and starts no other: the finished ones are pooled, or, if none
/// finished, the error says so. `progress` gets "process 2/3..." lines when not null.
Expected<ProcessesOutcome> bench_processes(const BenchOptions& o, std::ostream* progress = nullptr);

}  // namespace mosaic::api
