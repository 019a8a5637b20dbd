// api::bench_processes (api/bench_processes.hpp): children of the mosaic program, pooled.
#include "api/bench_processes.hpp"

#include <cstdio>
#include <cstdlib>

#include "api/child_processes.hpp"
#include "metrics/provenance.hpp"
#include "metrics/report.hpp"
#include "metrics/stats.hpp"

namespace mosaic::api {
namespace {

using nlohmann::json;

std::string joined(const std::vector<std::string>& v) { return join(v, ","); }

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

Expected<std::vector<std::string>> bench_child_arguments(const BenchOptions& o, const std::string& json_path) {
  if (o.find_max_batch) return Status::invalid("`find_max_batch` times nothing; it excludes `processes`");
  if (!o.distributed.empty()) return Status::invalid("a `distributed` bench runs under mpirun; it excludes `processes`");
  if (!o.csv.empty() || !o.trace.empty())
    return Status::invalid("`csv` and `trace` describe one process; with `processes` the report pools the samples");
  const BenchOptions d;
  std::vector<std::string> a{"mosaic", "bench", o.model};
  auto put = [&](const char* flag, const std::string& value) {
    a.push_back(flag);
    a.push_back(value);
  };
  if (o.common.batch > 0) put("--batch", std::to_string(o.common.batch));
  for (const auto& s : o.common.shapes) put("--shape", s);
  if (o.common.threads > 0) put("--threads", std::to_string(o.common.threads));
  if (o.common.seed != d.common.seed) put("--seed", std::to_string(o.common.seed));
  if (!o.assign.empty()) put("--assign", o.assign);
  else put("--backends", joined(o.backends));
  put("--fallback", o.fallback.empty() ? "none" : joined(o.fallback));
  if (o.mode != d.mode) put("--mode", o.mode);
  if (o.mode == "training") {
    put("--optimizer", o.optimizer);
    put("--lr", argument_number(o.lr));
  }
  put("--warmup", std::to_string(o.config.warmup));
  if (o.config.target_ci > 0) {
    put("--target-ci", argument_number(o.config.target_ci * 100));
    if (o.config.max_iterations > 0) put("--iterations", std::to_string(o.config.max_iterations));
  } else {
    put("--iterations", std::to_string(o.config.iterations));
    put("--repeats", std::to_string(o.config.repeats));
  }
  put("--max-seconds", argument_number(o.config.max_seconds));
  if (o.config.min_seconds > 0) put("--min-seconds", argument_number(o.config.min_seconds));
  if (o.config.overhead_pairs > 0) put("--metrics-overhead", std::to_string(o.config.overhead_pairs));
  if (!o.data.empty()) put("--data", o.data);
  if (!o.peaks) a.push_back("--no-peaks");
  if (o.refresh_peaks) a.push_back("--refresh-peaks");
  if (o.remeasure) a.push_back("--remeasure");
  if (o.auto_budget != d.auto_budget) put("--auto-budget", argument_number(o.auto_budget));
  if (!o.check) a.push_back("--no-check");
  if (!o.fuse) a.push_back("--no-fuse");
  if (o.attention != d.attention) put("--attention", o.attention);
  if (o.deterministic) a.push_back("--deterministic");
  if (o.precision != d.precision) put("--precision", o.precision);
  if (o.check) {
    put("--rtol", argument_number(o.rtol));
    put("--atol", argument_number(o.atol));
  }
  a.push_back("--quiet");  // the log keeps one line per configuration
  a.push_back("--no-db");  // the caller records the pooled run
  put("--json", json_path);
  append_plugin_arguments(a);
  return a;
}

Expected<ProcessesOutcome> bench_processes(const BenchOptions& o, std::ostream* progress) {
  if (o.processes < 1) return Status::invalid("`processes` must be at least 1, got " + std::to_string(o.processes));
  MOSAIC_RETURN_IF_ERROR(check_bench_options(o));
  MOSAIC_RETURN_IF_ERROR(bench_configs(o).status());
  MOSAIC_ASSIGN_OR_RETURN(
      ChildReports children,
      run_child_reports(o.processes, [&](const std::string& json_path) { return bench_child_arguments(o, json_path); },
                        progress));
  ProcessesOutcome out;
  for (int code : children.exit_codes) out.checks_ok = out.checks_ok && code == 0;
  out.interrupted = children.interrupted;
  out.finished = static_cast<int>(children.reports.size());
  out.pooled = combine(children.reports);
  if (out.interrupted) out.pooled["interrupted"] = true;
  out.provenance = run_provenance(o.model, {{"input", std::to_string(o.common.seed)}});
  out.pooled["provenance"] = provenance_json(out.provenance);
  return out;
}

}  // namespace mosaic::api
