// `mosaic history` (the runs in the results store) and `mosaic compare A B` (are two
// benchmark runs' timings different?). docs/cli.md#history-and-compare.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "api/history.hpp"
#include "cli/cli_util.hpp"
#include "ir/file_io.hpp"
#include "cli/commands.hpp"
#include "metrics/run_compare.hpp"

namespace mosaic::cli {
namespace {

using nlohmann::json;

std::string describe_doc(const std::string& name, const json& d) {
  const json& p = d.value("provenance", json::object());
  std::string s;
  if (d.value("schema", "") == "mosaic.generate/1") {
    const json& st = d.value("settings", json::object());
    s = name + ": " + d.value("model", "?") + ", " + d.value("backend", "?") + ", " + d.value("decoding", "?") + ", batch " +
        std::to_string(st.value("batch", int64_t{0})) + ", prompt " + std::to_string(st.value("prompt_tokens", int64_t{0})) +
        ", " + std::to_string(st.value("new_tokens", int64_t{0})) + " new tokens, " +
        std::to_string(st.value("runs", int64_t{0})) + " runs";
  } else {
    s = name + ": " + d.value("model", "?") + ", batch " + std::to_string(d.value("batch", int64_t{0})) + ", " +
        d.value("mode", "?") + ", " + std::to_string(d.value("threads", 0)) + " threads";
  }
  if (p.contains("run")) s += ", " + p["run"].value("time_utc", "");
  if (p.contains("build")) {
    const std::string c = p["build"].value("git_commit", "");
    s += ", commit " + c.substr(0, 10) + (p["build"].value("git_dirty", false) ? "+dirty" : "");
  }
  return s;
}

std::string pct(double change) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f%%", 100 * change);
  return b;
}

std::string pvalue(double p) {
  if (std::isnan(p)) return "-";
  char b[32];
  if (p < 1e-4)
    std::snprintf(b, sizeof b, "<1e-4");
  else
    std::snprintf(b, sizeof b, "%.4f", p);
  return b;
}

}  // namespace

int run_history(const HistoryOptions& o) {
  if (o.show > 0) {
    auto doc = api::run_document(o.db, o.show);
    if (!doc.ok()) return fail(doc.status());
    std::cout << doc->dump(2) << "\n";
    return 0;
  }
  auto history = api::history(o);
  if (!history.ok()) return fail(history.status());
  const auto& runs = history->runs;
  if (runs.empty()) {
    std::printf("no runs in %s%s\n", history->db.c_str(), o.kind.empty() && o.model.empty() ? "" : " match");
    return 0;
  }
  std::printf("%5s  %-20s  %-5s  %-24s  %-9s  %5s  %3s  %-12s  %s\n", "id", "time (UTC)", "kind", "model", "mode", "batch",
              "thr", "commit", "summary");
  for (const auto& r : runs) {
    std::string model = r.model;
    if (model.size() > 24) model = "..." + model.substr(model.size() - 21);
    const std::string commit = r.git_commit.substr(0, 7) + (r.git_dirty ? "+dirty" : "");
    std::printf("%5lld  %-20s  %-5s  %-24s  %-9s  %5s  %3d  %-12s  %s\n", static_cast<long long>(r.id), r.time_utc.c_str(),
                r.kind.c_str(), model.c_str(), r.mode.c_str(), r.batch ? std::to_string(r.batch).c_str() : "-", r.threads,
                commit.c_str(), r.summary.c_str());
  }
  std::printf("(%zu newest%s in %s; mosaic history --show ID prints a run's document)\n", runs.size(),
              o.limit > 0 && static_cast<int>(runs.size()) == o.limit ? ", --limit 0 for all" : "",
              history->db.c_str());
  return 0;
}

int run_compare(const CompareCliOptions& o) {
  if (Status st = check_output_paths({{"--json", o.json}}); !st.is_ok()) return fail(st);
  auto outcome = api::compare(o);
  if (!outcome.ok()) return fail(outcome.status());
  const RunComparison* r = &outcome->comparison;
  std::printf("A  %s\nB  %s\n", describe_doc(outcome->a_name, outcome->a_doc).c_str(),
              describe_doc(outcome->b_name, outcome->b_doc).c_str());
  for (const auto& w : r->warnings) std::printf("warning: %s\n", w.c_str());
  for (const auto& l : r->only_a) std::printf("only in A: %s\n", l.c_str());
  for (const auto& l : r->only_b) std::printf("only in B: %s\n", l.c_str());
  const bool generation = r->kind == "generate";
  if (generation && !r->by_process) {
    std::printf("test: Mann-Whitney U on the decode steps (the gaps between consecutive tokens of every timed run) and "
                "on the runs' times to first token, alpha %g; a change counts beyond %g%% of the median\n",
                o.stats.alpha, 100 * o.stats.threshold);
    std::printf("note: the steps of one process share its state (placement, cache, frequency), and two processes of the "
                "same build differ beyond the threshold in about a third of pairs here; generate --processes %zu or more "
                "on both sides gives the calibrated test (docs/generation.md#comparing-generations-and-the-report)\n\n",
                kMinCompareProcesses);
  } else if (r->by_process) {
    std::printf("test: Welch's t-test on the log of each process's median (%zu vs %zu processes), alpha %g; a change "
                "counts beyond %g%%\n\n",
                r->processes_a, r->processes_b, o.stats.alpha, 100 * o.stats.threshold);
  } else {
    std::printf("test: Mann-Whitney U on the raw samples, alpha %g; a change counts beyond %g%% of the median\n",
                o.stats.alpha, 100 * o.stats.threshold);
    std::printf("note: A has %zu process%s, B %zu: the test cannot see how much a whole run varies from process to "
                "process, and false-alarms more often than alpha (docs/metrics.md#comparing-runs); bench --processes "
                "%zu or more on both sides gives the calibrated test\n\n",
                r->processes_a, r->processes_a == 1 ? "" : "es", r->processes_b, kMinCompareProcesses);
  }
  const int width = generation ? 24 : 12;
  std::printf("%-*s %14s %14s %9s %8s  %s\n", width, generation ? "time" : "iteration",
              r->by_process ? "A ms (geo)" : "A median ms", r->by_process ? "B ms (geo)" : "B median ms", "change", "p",
              "verdict");
  for (const auto& c : r->configs) {
    const TimingComparison& t = c.total;
    std::printf("%-*s %9.4f %c=%-3zu %9.4f %c=%-3zu %9s %8s  %s\n", width, c.label.c_str(), t.median_a,
                t.by_process ? 'P' : 'n', t.n_a, t.median_b, t.by_process ? 'P' : 'n', t.n_b, pct(t.change).c_str(),
                pvalue(t.p_value).c_str(), change_name(t.verdict));
  }
  for (const auto& c : r->configs) {
    if (c.nodes.empty()) continue;
    int slower = 0, faster = 0;
    for (const auto& n : c.nodes) {
      slower += n.verdict == Change::kSlower;
      faster += n.verdict == Change::kFaster;
    }
    std::vector<const TimingComparison*> order;
    for (const auto& n : c.nodes) order.push_back(&n);
    std::sort(order.begin(), order.end(), [](const auto* x, const auto* y) {
      return std::fabs(x->median_b - x->median_a) > std::fabs(y->median_b - y->median_a);
    });
    std::printf("\n%s nodes (alpha %.2g each, Bonferroni over %zu): %d slower, %d faster; the %zu that moved most:\n",
                c.label.c_str(), c.node_alpha, c.nodes.size(), slower, faster,
                std::min<size_t>(order.size(), static_cast<size_t>(o.nodes)));
    std::printf("  %-28s %-18s %11s %11s %9s %8s  %s\n", "node", "op", "A median us", "B median us", "change", "p", "verdict");
    for (size_t i = 0; i < order.size() && static_cast<int>(i) < o.nodes; ++i) {
      const TimingComparison& n = *order[i];
      std::printf("  %-28s %-18s %11.1f %11.1f %9s %8s  %s\n", n.name.c_str(), n.op.c_str(), n.median_a, n.median_b,
                  pct(n.change).c_str(), pvalue(n.p_value).c_str(), change_name(n.verdict));
    }
  }
  std::string slower, faster, within;
  for (const auto& c : r->configs) {
    const std::string item = c.label + " " + pct(c.total.change);
    if (c.total.verdict == Change::kSlower) slower += (slower.empty() ? "" : ", ") + item;
    if (c.total.verdict == Change::kFaster) faster += (faster.empty() ? "" : ", ") + item;
    if (c.total.verdict == Change::kWithinThreshold) within += (within.empty() ? "" : ", ") + item;
  }
  std::printf("\n");
  if (!slower.empty()) std::printf("verdict: SLOWER beyond the %g%% threshold: %s\n", 100 * o.stats.threshold, slower.c_str());
  if (!faster.empty()) std::printf("verdict: faster beyond the %g%% threshold: %s\n", 100 * o.stats.threshold, faster.c_str());
  if (!within.empty()) std::printf("verdict: significant but within the %g%% threshold: %s\n", 100 * o.stats.threshold, within.c_str());
  if (slower.empty() && faster.empty() && within.empty()) std::printf("verdict: no detectable difference\n");
  if (!o.json.empty()) {
    if (Status st = write_file_atomic(o.json, comparison_json(*r, o.stats, outcome->a_name, outcome->b_name).dump(2) + "\n");
        !st.is_ok())
      return fail(st);
  }
  return r->slower() ? 1 : 0;
}

}  // namespace mosaic::cli
