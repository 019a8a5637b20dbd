// `generate --processes K` (api/generate.hpp): K children of the mosaic program, each its own
// warm-up and timed runs, pooled into one report; and the reader of a mosaic.generate/1
// document that pooling needs.
#include "api/child_processes.hpp"
#include "api/generate.hpp"
#include "metrics/provenance.hpp"

namespace mosaic::api {
namespace {

using nlohmann::json;

std::string integers(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

/// The arguments of a child `mosaic generate` that runs what `o` describes, records nothing
/// and writes its report to `json_path`; loaded plugin files go along.
Expected<std::vector<std::string>> generate_child_arguments(const GenerateOptions& o, const std::string& json_path) {
  if (o.per_node) return Status::invalid("`per_node` times one more generation in one process; it excludes `processes`");
  const GenerateOptions d;
  std::vector<std::string> a{"mosaic", "generate", o.model, "--backend", o.backend};
  auto put = [&](const char* flag, const std::string& value) {
    a.push_back(flag);
    a.push_back(value);
  };
  if (!o.prompt_ids.empty()) put("--prompt-ids", integers(o.prompt_ids));
  else if (!o.contexts.empty()) put("--context", integers(o.contexts));
  else put("--prompt-tokens", std::to_string(o.prompt_tokens));
  put("--new-tokens", std::to_string(o.new_tokens));
  put("--runs", std::to_string(o.runs));
  if (o.temperature != d.temperature) put("--temperature", argument_number(o.temperature));
  if (o.top_k != d.top_k) put("--top-k", std::to_string(o.top_k));
  if (o.precision != d.precision) put("--precision", o.precision);
  if (!o.fuse) a.push_back("--no-fuse");
  if (!o.peaks) a.push_back("--no-peaks");
  if (o.common.batch > 0) put("--batch", std::to_string(o.common.batch));
  for (const auto& s : o.common.shapes) put("--shape", s);
  if (o.common.threads > 0) put("--threads", std::to_string(o.common.threads));
  if (o.common.seed != d.common.seed) put("--seed", std::to_string(o.common.seed));
  a.push_back("--no-db");  // the caller records the pooled run
  put("--json", json_path);
  append_plugin_arguments(a);
  return a;
}

/// Sets the figures `f` recomputed from pooled runs on a report or a context point; the step's
/// bandwidth scales with the new TPOT (the bytes a step reads do not change).
template <class T>
void set_figures(T& x, const RunFigures& f) {
  if (f.tpot_ms > 0 && x.tpot_ms > 0) {
    x.step_gbs *= x.tpot_ms / f.tpot_ms;
    x.bandwidth_share *= x.tpot_ms / f.tpot_ms;
  }
  x.ttft_ms = f.ttft_ms;
  x.tpot_ms = f.tpot_ms;
  x.prefill_tokens_per_s = f.prefill_tokens_per_s;
  x.decode_tokens_per_s = f.decode_tokens_per_s;
  x.itl_p50_ms = f.itl_p50_ms;
  x.itl_p99_ms = f.itl_p99_ms;
}

/// The first report with every process's runs (and each depth's) pooled, the figures recomputed
/// from them, and each process's own medians kept.
Expected<GenerateReport> pool(const std::vector<json>& docs) {
  std::vector<GenerateReport> reports;
  for (size_t i = 0; i < docs.size(); ++i) {
    auto r = generate_report_from_json(docs[i]);
    if (!r.ok()) return r.status().with_context("process " + std::to_string(i + 1));
    reports.push_back(std::move(r).value());
  }
  GenerateReport out = reports[0];
  out.runs.clear();
  for (auto& p : out.contexts) p.runs.clear();
  bool same_tokens = true;
  for (const GenerateReport& r : reports) {
    ProcessFigures f{r.ttft_ms, r.tpot_ms, r.decode_tokens_per_s, {}};
    out.runs.insert(out.runs.end(), r.runs.begin(), r.runs.end());
    if (r.contexts.size() != out.contexts.size())
      return Status::internal("the processes swept different context depths");
    for (size_t i = 0; i < r.contexts.size(); ++i) {
      out.contexts[i].runs.insert(out.contexts[i].runs.end(), r.contexts[i].runs.begin(), r.contexts[i].runs.end());
      f.contexts.push_back({r.contexts[i].context, r.contexts[i].ttft_ms, r.contexts[i].tpot_ms});
    }
    out.processes.push_back(f);
    same_tokens = same_tokens && r.generated == out.generated;
  }
  const RunFigures f = run_figures(out.runs, out.batch, out.prompt_tokens);
  set_figures(out, f);
  out.e2e_ms = f.e2e_ms;
  out.itl_p90_ms = f.itl_p90_ms;
  for (auto& p : out.contexts) set_figures(p, run_figures(p.runs, out.batch, p.context));
  out.notes.push_back("pooled over " + std::to_string(reports.size()) + " processes, " + std::to_string(out.runs.size()) +
                      " timed runs in all; the planning, cache and bandwidth lines are the first process's");
  if (!same_tokens) out.notes.push_back("the processes generated different tokens: the backend is not deterministic here");
  return out;
}

}  // namespace

Expected<GenerateReport> generate_processes(const GenerateOptions& o) {
  if (o.processes < 2) return Status::invalid("`processes` must be at least 2 here, got " + std::to_string(o.processes));
  MOSAIC_RETURN_IF_ERROR(generate_child_arguments(o, "-").status());
  MOSAIC_ASSIGN_OR_RETURN(
      ChildReports children,
      run_child_reports(o.processes, [&](const std::string& path) { return generate_child_arguments(o, path); }, nullptr));
  MOSAIC_ASSIGN_OR_RETURN(GenerateReport out, pool(children.reports));
  if (children.interrupted)
    out.notes.push_back("interrupted: " + std::to_string(children.reports.size()) + " of " + std::to_string(o.processes) +
                        " processes finished and are pooled");
  out.provenance = provenance_json(run_provenance(o.model, {{"prompt and sampling", std::to_string(o.common.seed)}}));
  return out;
}

}  // namespace mosaic::api
