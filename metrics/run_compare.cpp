#include "metrics/run_compare.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "metrics/json_fields.hpp"
#include "metrics/peaks.hpp"
#include "metrics/stats.hpp"

namespace mosaic {
namespace {

using nlohmann::json;
using json_fields::at;
using json_fields::model_of;
using json_fields::check_same;
using json_fields::member;
using json_fields::numbers;
using json_fields::show;

double median_of(std::vector<double> v) { return describe(std::move(v)).median; }

/// The named node of a bench run, null when absent.
const json& node_of(const json& run, const std::string& name) {
  static const json none;
  if (!run.is_object() || !run.contains("nodes") || !run["nodes"].is_array()) return none;
  for (const auto& n : run["nodes"])
    if (n.value("name", "") == name) return n;
  return none;
}

/// Per-process values of configuration `label` in a bench --processes document: `key` of
/// each process's run ("median_ms"), or of one node (`node` in "node_median_us"). Processes
/// without it are skipped.
std::vector<double> process_values(const json& doc, const std::string& label, const char* key, const std::string& node) {
  std::vector<double> v;
  for (const auto& p : doc.value("processes", json::array())) {
    const json run = member(at(p, {"runs"}), label);
    const json value = node.empty() ? member(run, key) : member(member(run, key), node);
    if (value.is_number()) v.push_back(value.get<double>());
  }
  return v;
}

/// The verdict of a comparison with p-value `p` (NaN: too few samples to test).
TimingComparison judge(TimingComparison t, double p, double alpha, double threshold) {
  t.p_value = p;
  if (std::isnan(p))
    t.verdict = Change::kTooFewSamples;
  else if (p >= alpha)
    t.verdict = Change::kNone;
  else if (std::fabs(t.change) <= threshold)
    t.verdict = Change::kWithinThreshold;
  else
    t.verdict = t.change > 0 ? Change::kSlower : Change::kFaster;
  return t;
}

/// Every time the comparison reads (the members below, wherever they sit, and their
/// elements) is a finite number >= 0: a negative or infinite sample would turn into "faster
/// -4603%" rather than an error.
Status check_times(const json& j, const std::string& path, bool is_time, const std::string& which) {
  static const std::set<std::string> kTimes = {"iteration_ms",   "median_ms",          "node_median_us",
                                               "samples_us",     "backward_samples_us", "node_backward_median_us"};
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      const bool time = kTimes.count(k) != 0;
      MOSAIC_RETURN_IF_ERROR(check_times(it.value(), path.empty() ? k : path + "." + k, time, which));
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i)
      MOSAIC_RETURN_IF_ERROR(check_times(j[i], path + "[" + std::to_string(i) + "]", is_time, which));
  } else if (is_time && !j.is_null()) {
    if (!j.is_number())
      return Status::invalid(which + ": `" + path + "` is " + j.dump() + ", not a time (a number)");
    const double v = j.get<double>();
    if (!std::isfinite(v) || v < 0)
      return Status::invalid(which + ": `" + path + "` is " + j.dump() + ": a time must be a finite number >= 0");
  }
  return Status::ok();
}

Status check_doc(const json& d, const std::string& which) {
  const std::string schema = d.is_object() && d.contains("schema") && d["schema"].is_string() ? d["schema"].get<std::string>() : "";
  if (schema.rfind("mosaic.bench/", 0) != 0)
    return Status::invalid(which + ": not a bench report (schema '" + schema + "'); compare reads two `mosaic bench` runs or two `mosaic generate` runs");
  if (schema == "mosaic.bench/1")
    return Status::invalid(which + ": a mosaic.bench/1 report has no raw samples; rerun the benchmark");
  if (d.contains("runs")) {
    if (!d["runs"].is_array()) return Status::invalid(which + ": `runs` is " + d["runs"].dump() + ", not a list");
    for (size_t i = 0; i < d["runs"].size(); ++i) {
      const json& run = d["runs"][i];
      if (!run.is_object() || (run.contains("nodes") && !run["nodes"].is_array()))
        return Status::invalid(which + ": `runs[" + std::to_string(i) + "]` is not a configuration (an object whose `nodes` is a list)");
      const std::string at = "runs[" + std::to_string(i) + "]";
      if (run.contains("label") && !run["label"].is_string())
        return Status::invalid(which + ": `" + at + ".label` is " + run["label"].dump() + ", not a string");
      const json nodes = run.value("nodes", json::array());
      for (size_t k = 0; k < nodes.size(); ++k) {
        const json& n = nodes[k];
        const std::string node_at = at + ".nodes[" + std::to_string(k) + "]";
        if (!n.is_object()) return Status::invalid(which + ": `" + node_at + "` is " + n.dump() + ", not an object");
        for (const char* key : {"name", "op"})
          if (n.contains(key) && !n[key].is_string())
            return Status::invalid(which + ": `" + node_at + "." + key + "` is " + n[key].dump() + ", not a string");
        if (n.contains("view") && !n["view"].is_boolean())
          return Status::invalid(which + ": `" + node_at + ".view` is " + n["view"].dump() + ", not true or false");
      }
    }
  }
  return check_times(d, "", false, which);
}

}  // namespace

const char* change_name(Change c) {
  switch (c) {
    case Change::kNone: return "no detectable difference";
    case Change::kWithinThreshold: return "within threshold";
    case Change::kSlower: return "SLOWER";
    case Change::kFaster: return "faster";
    case Change::kTooFewSamples: return "too few samples";
  }
  return "?";
}

TimingComparison compare_samples(const std::string& name, const std::vector<double>& a, const std::vector<double>& b,
                                 double alpha, double threshold) {
  TimingComparison t;
  t.name = name;
  t.n_a = a.size();
  t.n_b = b.size();
  if (!a.empty()) t.median_a = median_of(a);
  if (!b.empty()) t.median_b = median_of(b);
  t.change = t.median_a > 0 ? t.median_b / t.median_a - 1 : 0;
  if (a.size() < kMinCompareSamples || b.size() < kMinCompareSamples) return judge(t, std::nan(""), alpha, threshold);
  return judge(t, mann_whitney_p(a, b), alpha, threshold);
}

TimingComparison compare_process_medians(const std::string& name, const std::vector<double>& a,
                                         const std::vector<double>& b, double alpha, double threshold) {
  TimingComparison t;
  t.name = name;
  t.by_process = true;
  t.n_a = a.size();
  t.n_b = b.size();
  auto logs = [](const std::vector<double>& v) {
    std::vector<double> l;
    for (double x : v) l.push_back(std::log(std::max(x, 1e-300)));
    return l;
  };
  auto mean = [](const std::vector<double>& v) { return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size(); };
  const std::vector<double> la = logs(a), lb = logs(b);
  t.median_a = a.empty() ? 0 : std::exp(mean(la));
  t.median_b = b.empty() ? 0 : std::exp(mean(lb));
  t.change = a.empty() || b.empty() ? 0 : std::exp(mean(lb) - mean(la)) - 1;
  if (a.size() < kMinCompareProcesses || b.size() < kMinCompareProcesses) return judge(t, std::nan(""), alpha, threshold);
  return judge(t, welch_t_p(la, lb), alpha, threshold);
}

bool RunComparison::slower() const {
  for (const auto& c : configs)
    if (c.total.verdict == Change::kSlower) return true;
  return false;
}

namespace {

/// What makes two timings incomparable: another computation (model) or another configuration
/// (mode, batch, threads, backends). Refused unless --force.
Status refuse_incomparable(const json& a, const json& b) {
  std::vector<std::string> differ;
  if (model_of(a) != model_of(b)) differ.push_back("model (" + show(at(a, {"model"})) + " vs " + show(at(b, {"model"})) + ")");
  for (const char* k : {"mode", "batch", "threads"})
    if (at(a, {k}) != at(b, {k})) differ.push_back(std::string(k) + " (" + show(at(a, {k})) + " vs " + show(at(b, {k})) + ")");
  auto labels = [](const json& d) {
    std::string l;
    std::vector<std::string> v;
    for (const auto& run : d.value("runs", json::array())) v.push_back(run.value("label", ""));
    std::sort(v.begin(), v.end());
    for (const auto& x : v) l += (l.empty() ? "" : ",") + x;
    return l;
  };
  if (labels(a) != labels(b)) differ.push_back("backends (" + labels(a) + " vs " + labels(b) + ")");
  return json_fields::refuse_differences(differ);
}

/// Warnings for what differs but does not make the timings incomparable (kernels, machine, build).
void warn_about_settings(const json& a, const json& b, std::vector<std::string>& warnings) {
  check_same("model", model_of(a), model_of(b), warnings);
  for (const char* k : {"batch", "mode", "threads", "kernels"}) check_same(k, at(a, {k}), at(b, {k}), warnings);
  for (const char* k : {"blas_core", "onednn_isa"})  // documents written before the backends' properties
    if (a.contains(k) || b.contains(k)) check_same(k, at(a, {k}), at(b, {k}), warnings);
  json_fields::warn_about_machine_and_build(a, b, warnings);
}

/// One configuration present in both: its iteration time, and every node both runs timed (by
/// name; views have no samples), per process when every process of both runs has the node's
/// median, else by raw samples, at alpha split over the nodes.
ConfigComparison compare_configuration(const json& a, const json& b, const json& ra, const json& rb,
                                       const RunComparison& r, const CompareOptions& o) {
  const std::string label = ra.value("label", "");
  const bool training = a.value("mode", "") == "training";
  ConfigComparison c;
  c.label = label;
  if (r.by_process)
    c.total = compare_process_medians(label, process_values(a, label, "median_ms", ""), process_values(b, label, "median_ms", ""),
                                      o.alpha, o.threshold);
  else
    c.total = compare_samples(label, numbers(at(ra, {"samples", "iteration_ms"})), numbers(at(rb, {"samples", "iteration_ms"})),
                              o.alpha, o.threshold);
  struct Pair {
    std::string name, op;
    std::vector<double> a, b;
    bool by_process;
  };
  std::vector<Pair> pairs;
  auto add_pair = [&](const std::string& shown, const std::string& op, const std::string& node, const char* key,
                      const char* samples) {
    const std::vector<double> pa = process_values(a, label, key, node), pb = process_values(b, label, key, node);
    if (r.by_process && pa.size() == r.processes_a && pb.size() == r.processes_b)
      pairs.push_back({shown, op, pa, pb, true});
    else
      pairs.push_back({shown, op, numbers(node_of(ra, node).value(samples, json())), numbers(node_of(rb, node).value(samples, json())),
                       false});
  };
  for (const auto& na : ra.value("nodes", json::array())) {
    if (na.value("view", false)) continue;
    const std::string name = na.value("name", "");
    if (node_of(rb, name).is_null()) continue;
    add_pair(name, na.value("op", ""), name, "node_median_us", "samples_us");
    if (training) add_pair(name + " (backward)", na.value("op", ""), name, "node_backward_median_us", "backward_samples_us");
  }
  c.node_alpha = pairs.empty() ? o.alpha : o.alpha / static_cast<double>(pairs.size());
  for (const auto& p : pairs) {
    TimingComparison t = p.by_process ? compare_process_medians(p.name, p.a, p.b, c.node_alpha, o.threshold)
                                      : compare_samples(p.name, p.a, p.b, c.node_alpha, o.threshold);
    t.op = p.op;
    c.nodes.push_back(t);
  }
  return c;
}

}  // namespace

Expected<RunComparison> compare_bench_runs(const json& a, const json& b, const CompareOptions& o) {
  MOSAIC_RETURN_IF_ERROR(check_doc(a, "A"));
  MOSAIC_RETURN_IF_ERROR(check_doc(b, "B"));
  MOSAIC_RETURN_IF_ERROR(json_fields::refuse_same_run(a, b));
  if (!o.force) MOSAIC_RETURN_IF_ERROR(refuse_incomparable(a, b));
  RunComparison r;
  warn_about_settings(a, b, r.warnings);
  auto processes = [](const json& d) { return d.contains("processes") && d["processes"].is_array() ? d["processes"].size() : size_t{1}; };
  r.processes_a = processes(a);
  r.processes_b = processes(b);
  r.by_process = r.processes_a >= kMinCompareProcesses && r.processes_b >= kMinCompareProcesses;

  std::vector<std::string> labels_b;
  for (const auto& rb : b.value("runs", json::array())) labels_b.push_back(rb.value("label", ""));
  for (const auto& ra : a.value("runs", json::array())) {
    const std::string label = ra.value("label", "");
    const json* rb = nullptr;
    for (const auto& x : b["runs"])
      if (x.value("label", "") == label) rb = &x;
    if (!rb) {
      r.only_a.push_back(label);
      continue;
    }
    // A run other processes were using the machine during measures their load as much as
    // the code (docs/metrics.md#cpu-utilisation): say so next to any verdict.
    for (const auto& [name, run] : {std::pair<const char*, const json*>{"A", &ra}, {"B", rb}}) {
      const json share = at(*run, {"summary", "others_cpu"});
      if (share.is_number() && share.get<double>() > kPeaksContended)
        r.warnings.push_back(label + " in " + name + " was CONTENDED: other processes used " +
                             std::to_string(static_cast<int>(100 * share.get<double>() + 0.5)) +
                             "% of the machine while it was measured; a difference may be theirs");
    }
    r.configs.push_back(compare_configuration(a, b, ra, *rb, r, o));
    labels_b.erase(std::remove(labels_b.begin(), labels_b.end(), label), labels_b.end());
  }
  r.only_b = labels_b;
  if (r.configs.empty())
    return Status::invalid("A and B share no configuration (A has " + std::to_string(r.only_a.size()) + ", B has " +
                           std::to_string(r.only_b.size()) + "; labels are backends or 'mixed')");
  return r;
}

json comparison_json(const RunComparison& r, const CompareOptions& o, const std::string& a_name, const std::string& b_name) {
  auto timing = [](const TimingComparison& t) {
    return json{{"name", t.name},
                {"op", t.op.empty() ? json() : json(t.op)},
                {"n_a", t.n_a},
                {"n_b", t.n_b},
                {"median_a", t.median_a},
                {"median_b", t.median_b},
                {"change", t.change},
                {"p_value", std::isnan(t.p_value) ? json() : json(t.p_value)},
                {"verdict", change_name(t.verdict)},
                {"unit", !t.unit.empty() ? t.unit : t.by_process ? "process" : "iteration"}};
  };
  json j{{"schema", "mosaic.compare/1"}, {"kind", r.kind}, {"a", a_name}, {"b", b_name}, {"alpha", o.alpha},
         {"threshold", o.threshold},
         {"test", r.by_process ? "welch-log-process-medians" : "mann-whitney-samples"},
         {"processes_a", r.processes_a}, {"processes_b", r.processes_b},
         {"warnings", r.warnings}, {"only_in_a", r.only_a}, {"only_in_b", r.only_b}, {"slower", r.slower()},
         {"configs", json::array()}};
  for (const auto& c : r.configs) {
    // A bench configuration's time is an iteration's; a generation's a decode step's or a first token's.
    json cj{{"label", c.label}, {r.kind == "generate" ? "time_ms" : "iteration_ms", timing(c.total)},
            {"node_alpha", c.node_alpha}, {"nodes_us", json::array()}};
    for (const auto& n : c.nodes) cj["nodes_us"].push_back(timing(n));
    j["configs"].push_back(cj);
  }
  return j;
}

}  // namespace mosaic
