// `mosaic compare` of two generate runs (mosaic.generate/1, docs/generation.md): the decode
// step and the time to first token, each a configuration of the comparison (metrics/run_compare.hpp).
#include <algorithm>
#include <cmath>
#include <tuple>

#include "metrics/json_fields.hpp"
#include "metrics/run_compare.hpp"

namespace mosaic {
namespace {

using nlohmann::json;
using json_fields::at;
using json_fields::model_of;
using json_fields::check_same;
using json_fields::show;

/// `runs` of a generation (or of one context depth): each {"token_ms": [...]}, the times at
/// which its tokens were known, finite, >= 0 and never decreasing.
Status check_runs(const json& runs, const std::string& path, const std::string& which) {
  if (runs.is_null()) return Status::ok();
  if (!runs.is_array()) return Status::invalid(which + ": `" + path + "` is " + runs.dump() + ", not a list");
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string at_run = path + "[" + std::to_string(i) + "].token_ms";
    const json t = runs[i].is_object() ? runs[i].value("token_ms", json()) : json();
    if (!t.is_array()) return Status::invalid(which + ": `" + at_run + "` is missing or not a list");
    double last = 0;
    for (size_t k = 0; k < t.size(); ++k) {
      const double v = t[k].is_number() ? t[k].get<double>() : std::nan("");
      if (!std::isfinite(v) || v < last)
        return Status::invalid(which + ": `" + at_run + "[" + std::to_string(k) + "]` is " + t[k].dump() +
                               ": token times are finite numbers >= 0 that never decrease");
      last = v;
    }
  }
  return Status::ok();
}

Status check_generate_doc(const json& d, const std::string& which) {
  const std::string schema = d.is_object() && d.contains("schema") && d["schema"].is_string() ? d["schema"].get<std::string>() : "";
  if (schema != "mosaic.generate/1")
    return Status::invalid(which + ": not a generate report (schema '" + schema + "'); compare reads two `mosaic generate` "
                           "runs or two `mosaic bench` runs");
  MOSAIC_RETURN_IF_ERROR(check_runs(d.value("runs", json()), "runs", which));
  const json contexts = d.value("contexts", json());
  if (contexts.is_null()) return Status::ok();
  if (!contexts.is_array()) return Status::invalid(which + ": `contexts` is " + contexts.dump() + ", not a list");
  for (size_t i = 0; i < contexts.size(); ++i) {
    const std::string path = "contexts[" + std::to_string(i) + "]";
    if (!contexts[i].is_object() || !contexts[i].value("context", json()).is_number_integer())
      return Status::invalid(which + ": `" + path + ".context` is missing or not a whole number");
    MOSAIC_RETURN_IF_ERROR(check_runs(contexts[i].value("runs", json()), path + ".runs", which));
  }
  return Status::ok();
}

/// The precision a generation ran in (documents from before bf16 generation: float32).
std::string precision_of(const json& d) {
  const json p = at(d, {"settings", "precision"});
  return p.is_string() ? p.get<std::string>() : "f32";
}

/// What makes two generations incomparable: another model, backend, decoding, workload or
/// precision.
Status refuse_incomparable(const json& a, const json& b) {
  std::vector<std::string> differ;
  if (model_of(a) != model_of(b)) differ.push_back("model (" + show(at(a, {"model"})) + " vs " + show(at(b, {"model"})) + ")");
  for (const char* k : {"backend", "decoding"})
    if (at(a, {k}) != at(b, {k})) differ.push_back(std::string(k) + " (" + show(at(a, {k})) + " vs " + show(at(b, {k})) + ")");
  for (const char* k : {"batch", "prompt_tokens", "new_tokens", "sampling"})
    if (at(a, {"settings", k}) != at(b, {"settings", k}))
      differ.push_back(std::string(k) + " (" + show(at(a, {"settings", k})) + " vs " + show(at(b, {"settings", k})) + ")");
  if (precision_of(a) != precision_of(b)) differ.push_back("precision (" + precision_of(a) + " vs " + precision_of(b) + ")");
  return json_fields::refuse_differences(differ);
}

/// The decode steps (consecutive tokens' gaps) and first-token times of `runs`.
void samples(const json& runs, std::vector<double>& steps, std::vector<double>& first) {
  if (!runs.is_array()) return;
  for (const auto& r : runs) {
    const std::vector<double> t = json_fields::numbers(r.value("token_ms", json()));
    if (t.empty()) continue;
    first.push_back(t.front());
    for (size_t i = 1; i < t.size(); ++i) steps.push_back(t[i] - t[i - 1]);
  }
}

/// Each process's median of `key` ("tpot_ms", "ttft_ms") in a --processes document, at one
/// context depth (`depth` >= 0) or at the top level; processes without it are skipped.
std::vector<double> process_values(const json& doc, const char* key, int64_t depth) {
  std::vector<double> v;
  const json processes = doc.value("processes", json());
  if (!processes.is_array()) return v;
  for (const auto& p : processes) {
    json value = json_fields::member(p, key);
    if (depth >= 0) {
      value = json();
      const json contexts = json_fields::member(p, "contexts");
      if (contexts.is_array())
        for (const auto& d : contexts)
          if (d.value("context", int64_t{-1}) == depth) value = json_fields::member(d, key);
    }
    if (value.is_number()) v.push_back(value.get<double>());
  }
  return v;
}

/// The decode step and the first token of one pair of run lists (at context `depth`, or -1
/// for the top level), as two configurations: by process when both runs have kMinCompareProcesses
/// processes (each process's TPOT and TTFT, Welch on their logs), else by sample.
void compare_pair(const json& a, const json& b, const json& runs_a, const json& runs_b, int64_t depth,
                  const CompareOptions& o, RunComparison& r) {
  const std::string suffix = depth >= 0 ? " @ " + std::to_string(depth) : "";
  std::vector<double> steps_a, first_a, steps_b, first_b;
  samples(runs_a, steps_a, first_a);
  samples(runs_b, steps_b, first_b);
  for (const auto& [label, unit, key, sa, sb] :
       {std::tuple<std::string, const char*, const char*, const std::vector<double>*, const std::vector<double>*>{
            "decode step" + suffix, "decode step", "tpot_ms", &steps_a, &steps_b},
        {"first token" + suffix, "run", "ttft_ms", &first_a, &first_b}}) {
    ConfigComparison c;
    c.label = label;
    if (r.by_process) {
      c.total = compare_process_medians(label, process_values(a, key, depth), process_values(b, key, depth), o.alpha,
                                        o.threshold);
    } else {
      c.total = compare_samples(label, *sa, *sb, o.alpha, o.threshold);
      c.total.unit = unit;
    }
    c.node_alpha = o.alpha;
    r.configs.push_back(c);
  }
}

}  // namespace

Expected<RunComparison> compare_generate_runs(const json& a, const json& b, const CompareOptions& o) {
  MOSAIC_RETURN_IF_ERROR(check_generate_doc(a, "A"));
  MOSAIC_RETURN_IF_ERROR(check_generate_doc(b, "B"));
  MOSAIC_RETURN_IF_ERROR(json_fields::refuse_same_run(a, b));
  if (!o.force) MOSAIC_RETURN_IF_ERROR(refuse_incomparable(a, b));
  RunComparison r;
  r.kind = "generate";
  check_same("model", model_of(a), model_of(b), r.warnings);
  for (const char* k : {"backend", "decoding"}) check_same(k, at(a, {k}), at(b, {k}), r.warnings);
  for (const char* k : {"batch", "prompt_tokens", "new_tokens", "sampling"})
    check_same(k, at(a, {"settings", k}), at(b, {"settings", k}), r.warnings);
  check_same("precision", json(precision_of(a)), json(precision_of(b)), r.warnings);
  json_fields::warn_about_machine_and_build(a, b, r.warnings);
  auto processes = [](const json& d) {
    const json p = d.value("processes", json());
    return p.is_array() ? std::max<size_t>(1, p.size()) : size_t{1};
  };
  r.processes_a = processes(a);
  r.processes_b = processes(b);
  r.by_process = r.processes_a >= kMinCompareProcesses && r.processes_b >= kMinCompareProcesses;
  // A --context sweep: each depth both runs swept, by its own timed runs (the top level is the
  // first depth's); a depth in one run only is listed as such.
  const json ca = a.value("contexts", json()), cb = b.value("contexts", json());
  if (ca.is_array() && !ca.empty() && cb.is_array() && !cb.empty()) {
    auto depth = [](const json& p) { return p.value("context", int64_t{0}); };
    for (const auto& pa : ca) {
      const json* pb = nullptr;
      for (const auto& x : cb)
        if (depth(x) == depth(pa)) pb = &x;
      const std::string at_depth = " @ " + std::to_string(depth(pa));
      if (!pb) {
        r.only_a.push_back("context" + at_depth);
        continue;
      }
      compare_pair(a, b, pa.value("runs", json()), pb->value("runs", json()), depth(pa), o, r);
    }
    for (const auto& pb : cb) {
      bool both = false;
      for (const auto& x : ca) both = both || depth(x) == depth(pb);
      if (!both) r.only_b.push_back("context @ " + std::to_string(depth(pb)));
    }
  } else {
    compare_pair(a, b, a.value("runs", json()), b.value("runs", json()), -1, o, r);
  }
  if (r.configs.empty())
    return Status::invalid("A and B share no context depth (A has " + std::to_string(r.only_a.size()) + ", B has " +
                           std::to_string(r.only_b.size()) + ")");
  return r;
}

}  // namespace mosaic
