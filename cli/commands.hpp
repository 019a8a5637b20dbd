// The mosaic subcommands as functions (main.cpp is a thin CLI11 layer over these; each is a
// shell over the library API, api/: it calls it, prints the report, writes files).
// Each returns the process exit code: 0 success, 1 a check failed (mismatch, failed
// conformance case), 2 bad input or usage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "api/bench.hpp"
#include "api/max_batch.hpp"
#include "api/history.hpp"
#include "api/html_report.hpp"
#include "api/info.hpp"
#include "api/models.hpp"
#include "api/plan.hpp"
#include "api/simulate.hpp"
#include "api/verify.hpp"
#include "backends/registry.hpp"
#include "cli/cli_util.hpp"
#include "core/plan.hpp"
#include "metrics/benchmark.hpp"
#include "metrics/run_compare.hpp"

namespace mosaic::cli {


/// `mosaic info`: api::info's query, and whether to list every node.
struct InfoOptions : api::InfoQuery {
  bool nodes = true;
};

/// `mosaic plan`: the placement, fallbacks, layouts and conversions of one plan (api::plan's
/// query), and the --json file.
struct PlanCliOptions : api::PlanQuery {
  std::string json;
};
int run_plan(const PlanCliOptions& o);



struct ExportOptions {
  std::string name;
  std::string output;
  uint64_t seed = 0;
};

struct HistoryOptions : api::HistoryQuery {
  int64_t show = 0;  ///< > 0: print that run's document
};

struct CompareCliOptions : api::CompareQuery {
  std::string json;
  int nodes = 10;  ///< node rows shown per configuration
};

/// `mosaic report`: api::html_report's query (runs by name only).
using ReportOptions = api::ReportQuery;

/// `mosaic simulate`: api::simulate's query, the --json file, and --measure-network's options.
struct SimulateOptions : api::SimulateQuery {
  std::string json;
  bool measure_network = false;
  std::string network_out = "network.json";
  double max_mb = 64;
};

int run_info(const InfoOptions& o);
/// The end of `mosaic CMD --help`: examples to paste and the documentation page ("" if none).
std::string command_footer(const std::string& command);
/// Predicted data-parallel scaling (cli/simulate.cpp; docs/distributed.md).
int run_simulate(const SimulateOptions& o);
/// One self-contained HTML page with matplotlib figures (api/html_report.hpp).
int run_report(const ReportOptions& o);
int run_history(const HistoryOptions& o);
/// Exit 1 when a configuration is significantly slower beyond the threshold.
int run_compare(const CompareCliOptions& o);
int run_bench(const BenchOptions& o);
/// bench --processes K (K > 1): K child processes of this command, samples pooled.
int run_bench_processes(const BenchOptions& o);
/// bench --find-max-batch: per configuration, the largest batch within the memory limit.
int run_find_max_batch(const BenchOptions& o);
int run_verify(const VerifyOptions& o);
int run_export(const ExportOptions& o);
/// Prints the op x backend table of the kernel registry (Markdown with --markdown).
/// The registry: each backend with what it computes with and its libraries, then the op
/// coverage table; `names_only`: one name per line.
int run_backends(bool markdown, bool names_only, bool available_only = false);

}  // namespace mosaic::cli
