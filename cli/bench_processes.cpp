// bench --processes K: prints api::bench_processes's pooled report (api/bench_processes.hpp),
// writes --json and records the run.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "api/bench_processes.hpp"
#include "ir/file_io.hpp"
#include "ir/interrupt.hpp"
#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "metrics/provenance.hpp"
#include "metrics/stats.hpp"

namespace mosaic::cli {
using nlohmann::json;

int run_bench_processes(const BenchOptions& o) {
  if (Status st = check_output_paths({{"--json", o.json}, {"--csv", o.csv}, {"--trace", o.trace}}); !st.is_ok())
    return fail(st);
  if (!o.csv.empty() || !o.trace.empty())
    return fail(Status::invalid("--csv and --trace describe one process; with --processes use --json (pooled samples)"));
  auto db = open_run_store(o.db);
  if (!db.ok()) return fail(db.status());
  // Ctrl-C/SIGTERM: the running process gets the signal, stops and is left out (its last
  // configuration was cut short); the processes that finished are pooled, printed, written and
  // recorded, marked interrupted; no further process starts. Exit 130/143.
  install_interrupt_handlers();
  auto outcome = api::bench_processes(o, &std::cerr);
  if (!outcome.ok()) {
    if (interrupted()) {
      std::cerr << "mosaic: interrupted before a process finished: nothing to pool, nothing written or recorded\n";
      return interrupt_exit_code();
    }
    return fail(outcome.status());
  }
  json& combined = outcome->pooled;
  const Provenance& provenance = outcome->provenance;
  std::printf("model %s  batch %lld  mode %s  %zu independent processes, samples pooled\n", o.model.c_str(),
              static_cast<long long>(combined["batch"].get<int64_t>()), o.mode.c_str(), static_cast<size_t>(outcome->finished));
  for (const auto& run : combined["runs"]) {
    const std::string label = run["label"];
    std::printf("\n== %s ==\n  per process:", label.c_str());
    std::vector<double> medians;
    for (const auto& p : combined["processes"]) {
      const double ips = p["runs"][label]["images_per_s"];
      medians.push_back(ips);
      std::printf(" %.1f", ips);
    }
    const SampleStats between = describe(medians);
    std::printf(" images/s (spread %.1f%% of the median)\n", between.median > 0 ? 100 * (between.max - between.min) / between.median : 0.0);
    const auto& st = run["iteration_ms"];
    std::printf("  pooled: %.1f images/s  median %.3f ms", run["summary"]["images_per_s"].get<double>(), st["median"].get<double>());
    if (!st["ci95_low"].is_null())
      std::printf("  95%% CI [%.3f, %.3f] ms", st["ci95_low"].get<double>(), st["ci95_high"].get<double>());
    std::printf("  %d iterations  %.1f GFLOP/s%s\n", run["iterations"]["measured"].get<int>(),
                run["summary"]["gflops"].get<double>(), st["noisy"].get<bool>() ? "  NOISY" : "");
    if (run["iterations"]["adaptive"].get<bool>()) {
      int converged = 0;
      for (const auto& p : combined["processes"]) converged += p["runs"][label]["converged"] == true;
      std::printf("  adaptive: target precision reached in %d of %zu processes\n", converged, combined["processes"].size());
    }
    std::printf("  check: %s\n", run["check"]["passed"].get<bool>() ? "every process matches naive" : "MISMATCH in a process");
  }
  std::printf("\nreproduce: %s\n", reproducer(provenance).c_str());
  if (!o.json.empty()) {
    if (Status st = write_file_atomic(o.json, combined.dump(2) + "\n"); !st.is_ok()) return fail(st);
  }
  if (Status st = record_run(db.value().get(), combined); !st.is_ok()) return fail(st);
  if (outcome->interrupted) {
    std::cerr << "mosaic: interrupted: pooled, wrote and recorded the " << outcome->finished << " of " << o.processes
              << " processes that finished (marked \"interrupted\": true)\n";
    return interrupt_exit_code();
  }
  return outcome->checks_ok ? 0 : 1;
}

}  // namespace mosaic::cli
