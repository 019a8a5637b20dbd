#include "api/bench_auto.hpp"

#include <algorithm>
#include <iostream>
#include <cstdio>

#include "backends/machine_probe.hpp"
#include "backends/registry.hpp"
#include "api/util.hpp"

namespace mosaic::api {

Status check_auto_options(const BenchOptions& o) {
  if (o.assign == "auto" && (o.find_max_batch || o.processes > 1 || !o.distributed.empty()))
    return Status::invalid("`assign` auto measures and times in this one process: it excludes `find_max_batch`, "
                           "`processes` and `distributed`");
  return Status::ok();
}

Status add_auto_configs(const BenchOptions& o, const Graph& timed, const AutoTiming& timing,
                        const std::vector<std::string>& fallback, BenchReport& report, BenchConfigs& configs) {
  const auto& reg = builtin_registry();
  const Provenance& p = report.provenance;
  const bool training = timing.plan_options.training;
  const std::string key = (p.model_sha256.empty() ? o.model : p.model_sha256) + " | batch " +
                          std::to_string(report.batch) + (o.fuse ? " | fused" : " | unfused") +
                          (training ? " | training (" + o.optimizer + ")" : "") + " | " + p.cpu_model + " | " +
                          std::to_string(report.threads) + " threads | " + kernels_line(p.kernels) + " | backends " +
                          join(reg.backends(), ",") + " | fallback " + join(fallback, ",");
  const double bandwidth = report.peaks.bandwidth_gbs > 0 ? report.peaks.bandwidth_gbs : probe_triad_gbs();
  AutoTiming told = timing;
  told.budget_seconds = o.auto_budget;
  if (o.verbose) told.say = [](const std::string& line) { std::cerr << line << "\n"; };
  MOSAIC_ASSIGN_OR_RETURN(const AutoPlacement chosen,
                          choose_auto_placement(timed, reg, told, fallback, bandwidth, key, o.remeasure));
  for (const auto& b : chosen.candidates) configs.emplace_back(b, Placement::all_on(b, fallback));
  configs.emplace_back("auto", chosen.placement);
  const char* unit = training ? "ms per training step" : "ms per batch";
  char buf[300];
  auto times = [](const std::map<std::string, double>& ms) {
    std::vector<std::string> parts;
    char b[120];
    for (const auto& [backend, t] : ms) {
      std::snprintf(b, sizeof b, "%s %.3f", backend.c_str(), t);
      parts.push_back(b);
    }
    return join(parts, ", ");
  };
  std::snprintf(buf, sizeof buf, "auto placement (%s): predicted %.3f %s",
                chosen.cached ? "from the cache; --remeasure measures again" : "measured every candidate alone",
                chosen.predicted_ms, unit);
  report.notes.push_back(std::string(buf) + "; each candidate alone, one after another: " + times(chosen.single_ms) + " ms");
  if (!chosen.checked_singles_ms.empty())
    report.notes.push_back("auto placement check, alternating rounds, each candidate alone: " +
                           times(chosen.checked_singles_ms) + " ms; fastest " + chosen.best_single);
  if (!chosen.sequential_best.empty())
    report.notes.push_back("auto placement: one after another, " + chosen.sequential_best +
                           " looked fastest; the alternating rounds put " + chosen.best_single +
                           " ahead, so auto is judged against " + chosen.best_single);
  report.notes.push_back(chosen.differences.empty()
                             ? "auto placement: every node on " + chosen.best_single
                             : "auto placement: " + std::to_string(chosen.differences.size()) + " nodes moved: " +
                                   join(chosen.differences, "; "));
  if (chosen.checked_mixed_ms > 0) {
    std::snprintf(buf, sizeof buf, "auto placement check, side by side: %.3f ms mixed vs %.3f ms on %s alone%s",
                  chosen.checked_mixed_ms, chosen.checked_single_ms, chosen.best_single.c_str(),
                  chosen.rejected.empty() ? "" : ": not faster, so every node goes there");
    report.notes.push_back(buf);
  }
  if (!chosen.rejected.empty())
    report.notes.push_back("auto placement: the cost model's moves, not kept: " + join(chosen.rejected, "; "));
  report.auto_placement = {{"cached", chosen.cached},
                           {"mode", training ? "training" : "inference"},
                           {"predicted_ms", chosen.predicted_ms},
                           {"best_single", chosen.best_single},
                           {"moved", chosen.differences},
                           {"rejected", chosen.rejected}};
  if (chosen.checked_single_ms > 0) {
    report.auto_placement["check"] = {{"single_ms", chosen.checked_single_ms}, {"singles_ms", chosen.checked_singles_ms}};
    if (chosen.checked_mixed_ms > 0) report.auto_placement["check"]["mixed_ms"] = chosen.checked_mixed_ms;
    if (!chosen.sequential_best.empty()) report.auto_placement["check"]["sequential_best"] = chosen.sequential_best;
  }
  return Status::ok();
}

Status auto_side_by_side(const BenchOptions& o, const BenchConfigs& configs,
                         const std::vector<std::unique_ptr<Plan>>& plans, const AutoTiming& timing, BenchReport& report) {
  const ConfigReport* mixed = nullptr;
  const ConfigReport* best = nullptr;
  for (const auto& c : report.configs) {
    if (c.label == "auto") mixed = &c;
    else if (!best || c.median_ms < best->median_ms) best = &c;
  }
  if (!mixed || !best) return Status::ok();
  char buf[400];
  std::snprintf(buf, sizeof buf, "auto placement measured: %.3f ms per %s, %.3fx the fastest single backend (%s, %.3f ms)",
                mixed->median_ms, timing.plan_options.training ? "step" : "batch", best->median_ms / mixed->median_ms,
                best->label.c_str(), best->median_ms);
  report.notes.push_back(buf);
  size_t im = configs.size(), ib = configs.size();
  for (size_t i = 0; i < configs.size(); ++i) {
    if (configs[i].first == mixed->label) im = i;
    if (configs[i].first == best->label) ib = i;
  }
  if (im == configs.size() || ib == configs.size()) return Status::ok();
  BenchConfig cfg = o.config;
  cfg.warmup = 1;
  cfg.iterations = std::max(5, o.config.iterations / 5);
  cfg.max_seconds = std::max(2.0, o.config.max_seconds / 5);
  cfg.target_ci = 0;
  cfg.min_seconds = 0;
  cfg.repeats = 1;
  std::vector<double> ratios;
  for (int round = 0; round < 5; ++round) {
    cfg.progress = "auto vs " + best->label + ", alternating (round " + std::to_string(round + 1) + "/5)";
    MOSAIC_ASSIGN_OR_RETURN(const BenchResult rm, timing.run(*plans[im], cfg));
    MOSAIC_ASSIGN_OR_RETURN(const BenchResult rb, timing.run(*plans[ib], cfg));
    ratios.push_back(rb.iteration.median / rm.iteration.median);
  }
  std::sort(ratios.begin(), ratios.end());
  const bool same = report.auto_placement.value("moved", nlohmann::json::array()).empty();
  report.auto_placement["side_by_side_against"] = best->label;
  report.auto_placement["side_by_side_ratio"] = ratios[2];
  report.auto_placement["side_by_side_ratio_min"] = ratios.front();
  report.auto_placement["side_by_side_ratio_max"] = ratios.back();
  report.auto_placement["side_by_side_rounds"] = ratios.size();
  std::snprintf(buf, sizeof buf, "auto placement, side by side in 5 alternating rounds: %.3fx %s (per-round ratios %.3f..%.3f)%s",
                ratios[2], best->label.c_str(), ratios.front(), ratios.back(),
                same ? "; the same plan on both sides, so the spread is the noise alone" : "");
  report.notes.push_back(buf);
  return Status::ok();
}

}  // namespace mosaic::api
