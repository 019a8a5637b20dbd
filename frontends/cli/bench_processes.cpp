// bench --processes K: the same benchmark in K independent processes (fresh address space,
// page cache, thread pools, heap layout), combined: samples pooled, statistics recomputed,
// per-process throughput kept. The report's "x3" (seed 001) is three processes, not three
// loops in one.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "api/bench_auto.hpp"
#include "core/file_io.hpp"
#include "core/interrupt.hpp"
#include "frontends/cli/cli_util.hpp"
#include "frontends/cli/commands.hpp"
#include "metrics/provenance.hpp"
#include "metrics/report.hpp"
#include "metrics/stats.hpp"

namespace mosaic::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

/// The command line without the options the parent handles itself (--processes, --json,
/// --csv, --trace, --db), as `--opt VALUE` or `--opt=VALUE`; children record nothing.
std::vector<std::string> child_args(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    bool dropped = false;
    for (const char* opt : {"--processes", "--json", "--csv", "--trace", "--db"}) {
      const std::string o = opt;
      if (argv[i] == o) {
        ++i;  // and its value
        dropped = true;
      } else if (argv[i].rfind(o + "=", 0) == 0) {
        dropped = true;
      }
    }
    if (!dropped && argv[i] != "--no-db") out.push_back(argv[i]);
  }
  out.push_back("--no-db");  // the parent records the pooled run
  return out;
}

/// Statistics of samples already in the report's unit.
json stats(const std::vector<double>& v) { return stats_json(describe(v), 1.0); }

std::vector<double> as_vector(const json& a) { return a.is_array() ? a.get<std::vector<double>>() : std::vector<double>{}; }

/// Pools the runs of every process into the first one's report.
json combine(std::vector<json>& reports) {
  json out = reports[0];
  const int64_t batch = out["batch"];
  out["config"]["processes"] = reports.size();
  out["processes"] = json::array();
  for (size_t p = 0; p < reports.size(); ++p) {
    json per = json::object();
    for (const auto& r : reports[p]["runs"]) {
      // Per-process medians of every node: the units `mosaic compare` tests between runs.
      json nodes = json::object(), backward = json::object();
      for (const auto& n : r["nodes"]) {
        if (n["view"].get<bool>()) continue;
        nodes[n["name"].get<std::string>()] = describe(as_vector(n["samples_us"])).median;
        if (!as_vector(n["backward_samples_us"]).empty())
          backward[n["name"].get<std::string>()] = describe(as_vector(n["backward_samples_us"])).median;
      }
      per[r["label"].get<std::string>()] = {{"images_per_s", r["summary"]["images_per_s"]},
                                            {"median_ms", r["summary"]["median_ms"]},
                                            {"node_median_us", nodes},
                                            {"node_backward_median_us", backward},
                                            {"check_passed", r["check"]["passed"]},
                                            {"converged", r["iterations"]["converged"]}};
    }
    out["processes"].push_back({{"process", p}, {"runs", per}});
  }
  for (size_t i = 0; i < out["runs"].size(); ++i) {
    json& run = out["runs"][i];
    std::vector<double> it, rep_ips;
    std::vector<int> rep;
    int rep_offset = 0;
    bool passed = true;
    for (auto& report : reports) {
      const json& r = report["runs"][i];
      for (double v : as_vector(r["samples"]["iteration_ms"])) it.push_back(v);
      int max_rep = -1;
      for (int k : r["samples"]["repeat"].get<std::vector<int>>()) {
        rep.push_back(k + rep_offset);
        max_rep = std::max(max_rep, k);
      }
      rep_offset += max_rep + 1;
      for (double v : as_vector(r["summary"]["repeat_images_per_s"])) rep_ips.push_back(v);
      passed = passed && r["check"]["passed"].get<bool>();
    }
    run["check"]["passed"] = passed;
    run["samples"] = {{"iteration_ms", it}, {"repeat", rep}};
    run["iteration_ms"] = stats(it);
    const double med = describe(it).median;
    run["summary"]["median_ms"] = med;
    run["summary"]["min_ms"] = describe(it).min;
    run["summary"]["images_per_s"] = med > 0 ? static_cast<double>(batch) / (med / 1e3) : 0;
    run["summary"]["repeat_images_per_s"] = rep_ips;
    const double flops = run["summary"]["total_flops"].get<double>() +
                         (run["summary"]["total_backward_flops"].is_null() ? 0.0 : run["summary"]["total_backward_flops"].get<double>());
    run["summary"]["gflops"] = med > 0 ? flops / (med * 1e6) : 0;
    run["iterations"]["measured"] = it.size();
    run["iterations"]["repeats"] = rep_offset;
    for (size_t n = 0; n < run["nodes"].size(); ++n) {
      json& node = run["nodes"][n];
      if (node["view"].get<bool>()) continue;
      std::vector<double> fwd, bwd;
      for (auto& report : reports) {
        const json& other = report["runs"][i]["nodes"][n];
        for (double v : as_vector(other["samples_us"])) fwd.push_back(v);
        for (double v : as_vector(other["backward_samples_us"])) bwd.push_back(v);
      }
      node["samples_us"] = fwd;
      node["backward_samples_us"] = bwd;
      node["forward_us"] = stats(fwd);
      node["backward_us"] = stats(bwd);
      const SampleStats f = describe(fwd);
      node["median_us"] = f.median;
      node["min_us"] = f.min;
      if (!node["gflops"].is_null()) node["gflops"] = f.median > 0 ? node["flops"].get<double>() / (f.median * 1e3) : 0;
      if (!bwd.empty()) node["backward_median_us"] = describe(bwd).median;
    }
  }
  return out;
}

}  // namespace

int run_bench_processes(const BenchOptions& o) {
  const std::vector<std::string>& argv = command_line_args();
  if (argv.empty()) return fail(Status::invalid("--processes needs the command line (internal error)"));
  if (Status st = check_auto_options(o); !st.is_ok()) return fail(st);
  if (Status st = check_output_paths({{"--json", o.json}, {"--csv", o.csv}, {"--trace", o.trace}}); !st.is_ok())
    return fail(st);
  if (!o.csv.empty() || !o.trace.empty())
    return fail(Status::invalid("--csv and --trace describe one process; with --processes use --json (pooled samples)"));
  auto db = open_run_store(o.db);
  if (!db.ok()) return fail(db.status());
  auto program = mosaic_executable();
  if (!program.ok()) return fail(program.status());
  const fs::path dir = fs::temp_directory_path() / ("mosaic_processes_" + std::to_string(getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  // Ctrl-C/SIGTERM: the running process gets the signal, stops and is left out (its last
  // configuration was cut short); the processes that finished are pooled, printed, written and
  // recorded, marked interrupted; no further process starts. Exit 130/143.
  install_interrupt_handlers();
  std::vector<json> reports;
  bool all_checks = true;
  for (int p = 0; p < o.processes && !interrupted(); ++p) {
    const std::string json_path = (dir / ("p" + std::to_string(p) + ".json")).string();
    const std::string log = (dir / ("p" + std::to_string(p) + ".log")).string();
    std::vector<std::string> args = child_args(argv);
    args.push_back("--json");
    args.push_back(json_path);
    std::cerr << "process " << p + 1 << "/" << o.processes << "...\n";
    const int code = run_program(program.value(), args, log, true);
    if (interrupted()) {
      std::cerr << "process " << p + 1 << " was stopped (" << (interrupt_signal() == SIGINT ? "SIGINT" : "SIGTERM")
                << ") and is left out\n";
      break;
    }
    std::ifstream jf(json_path);
    if ((code != 0 && code != 1) || !jf) {
      std::ifstream lf(log);
      std::cerr << lf.rdbuf();
      return fail(Status::internal("--processes: process " + std::to_string(p + 1) + " of " + std::to_string(o.processes) +
                                   " failed with exit code " + std::to_string(code) + " (its output is above)"));
    }
    all_checks = all_checks && code == 0;
    reports.push_back(json::parse(jf));
  }
  if (reports.empty()) {
    std::cerr << "mosaic: interrupted before a process finished: nothing to pool, nothing written or recorded\n";
    return interrupt_exit_code();
  }
  json combined = combine(reports);
  if (interrupted()) combined["interrupted"] = true;
  const Provenance provenance = run_provenance(o.model, {{"input", std::to_string(o.common.seed)}});
  combined["provenance"] = provenance_json(provenance);
  std::printf("model %s  batch %lld  mode %s  %zu independent processes, samples pooled\n", o.model.c_str(),
              static_cast<long long>(combined["batch"].get<int64_t>()), o.mode.c_str(), reports.size());
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
  if (interrupted()) {
    std::cerr << "mosaic: interrupted: pooled, wrote and recorded the " << reports.size() << " of " << o.processes
              << " processes that finished (marked \"interrupted\": true)\n";
    return interrupt_exit_code();
  }
  return all_checks ? 0 : 1;
}

}  // namespace mosaic::cli
