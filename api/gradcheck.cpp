#include "api/gradcheck.hpp"
#include "api/option_rules.hpp"

#include <algorithm>

#include "api/models.hpp"
#include "api/util.hpp"
#include "backends/registry.hpp"
#include "core/events.hpp"
#include "metrics/progress.hpp"
#include "validate/planted_bugs.hpp"

namespace mosaic::api {

Expected<GradcheckOutcome> gradcheck(const GradcheckRunOptions& o) {
  MOSAIC_RETURN_IF_ERROR(check_numbers(
      "gradcheck", {{"batch", o.batch}, {"threads", o.threads}, {"tolerance", o.check.tolerance}, {"eps", o.check.eps},
                    {"directions", o.check.directions}, {"elements", o.check.elements}, {"halvings", o.check.halvings},
                    {"min_probes", o.check.min_probes}}));
  MOSAIC_RETURN_IF_ERROR(set_num_threads(o.threads));
  KernelRegistry reg = builtin_registry();
  if (!reg.has_backend(o.backend))
    return unknown_backend(o.backend);
  std::vector<std::string> fallback;
  for (const auto& b : o.fallback) {
    if (b == "none") continue;
    if (!reg.has_backend(b))
      return unknown_backend(b, "none", "`fallback` backend");
    if (b != o.backend || !o.assign.empty()) fallback.push_back(b);
  }
  if (!o.assign.empty() && !o.plant.empty())
    return Status::invalid("`plant` plants a bug in one backend (`backend`); it excludes `assign`");
  MOSAIC_ASSIGN_OR_RETURN(Graph g, load_trainable(o.model, o.batch));
  GradcheckOutcome out;
  out.checked = o.backend;
  Placement placement = Placement::all_on(o.backend, fallback);
  if (!o.assign.empty()) {
    MOSAIC_ASSIGN_OR_RETURN(placement, assign_placement(o.assign, fallback));
    MOSAIC_RETURN_IF_ERROR(placement.check_names(g));
    out.checked = "placement " + placement.str();
  }
  if (!o.plant.empty()) {
    MOSAIC_RETURN_IF_ERROR(register_planted_bug(reg, o.backend, o.plant));
    out.checked += "+" + o.plant;
    placement = Placement::all_on(out.checked, fallback);
  }
  GradcheckOptions check = o.check;
  const int64_t hits_before = check.memo ? check.memo->hits() : 0;
  const int64_t t0 = now_ns();
  Progress progress("gradcheck " + out.checked);
  if (o.verbose)
    check.on_tensor = [&](size_t i, size_t n, const std::string& name) {
      progress.update(static_cast<double>(i), static_cast<double>(n), "tensors (" + name + ")");
    };
  auto report = mosaic::gradcheck(g, reg, placement, check);
  progress.finish();
  MOSAIC_RETURN_IF_ERROR(report.status());
  out.report = std::move(report).value();
  const GradcheckReport& r = out.report;
  out.passed = r.count(Verdict::kPass);
  out.failed = r.count(Verdict::kFail) + (r.forward_ok ? 0 : 1);
  out.inconclusive = r.count(Verdict::kInconclusive);
  out.seconds = static_cast<double>(now_ns() - t0) / 1e9;
  out.shared_evaluations = check.memo ? check.memo->hits() - hits_before : 0;
  return out;
}

Expected<std::vector<std::string>> gradcheck_backend_list(const std::string& value) {
  const KernelRegistry& reg = builtin_registry();
  if (value == "all") return reg.available_backends();
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    const std::string b = value.substr(start, comma - start);
    if (!reg.has_backend(b))
      return unknown_backend(b, "all");
    if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
    start = comma + 1;
  }
  return out;
}

Expected<std::vector<GradcheckOutcome>> gradcheck_backends(const GradcheckRunOptions& o,
                                                           const std::vector<std::string>& backends) {
  if (!o.assign.empty() && backends.size() > 1)
    return Status::invalid("`assign` checks one placement: it excludes a list of backends");
  GradcheckMemo memo;
  std::vector<GradcheckOutcome> outcomes;
  for (const std::string& b : backends) {
    GradcheckRunOptions one = o;
    one.backend = b;
    one.check.memo = &memo;
    MOSAIC_ASSIGN_OR_RETURN(GradcheckOutcome r, gradcheck(one));
    outcomes.push_back(std::move(r));
  }
  return outcomes;
}

nlohmann::json gradcheck_json(const GradcheckRunOptions& o, const GradcheckOutcome& out) {
  const GradcheckReport& r = out.report;
  nlohmann::json j;
  j["schema"] = "mosaic.gradcheck/1";
  j["model"] = o.model;
  j["backend"] = out.checked;
  j["batch"] = o.batch;
  j["seed"] = o.check.seed;
  j["provenance"] = provenance_json(run_provenance(o.model, {{"gradcheck", std::to_string(o.check.seed)}}));
  j["tolerance"] = o.check.tolerance;
  j["loss"] = r.loss;
  j["reference_loss"] = r.reference_loss;
  j["forward_ok"] = r.forward_ok;
  j["forward_error"] = r.forward_error;
  j["fallback_nodes"] = r.fallback_nodes;
  j["input_draws"] = r.input_draws;
  j["ambiguous_decisions"] = r.ambiguous;
  j["ambiguous_resolved"] = r.resolved;
  j["ambiguous_unresolved"] = r.unresolved;
  if (r.unresolved) j["ambiguous_unresolved_reason"] = r.unresolved_reason;
  j["float_reference_nodes"] = r.float_reference_nodes;
  for (const auto& t : r.tensors) {
    nlohmann::json e{{"name", t.name}, {"verdict", verdict_name(t.verdict)}, {"probes_judged", t.checked},
                     {"probes_at_kinks", t.kinks}, {"probes_unstable", t.unstable},
                     {"probes_at_floor", t.at_floor}, {"gradient_norm", t.gradient_norm}, {"floor", t.floor}};
    if (t.checked)
      e["worst"] = {{"probe", t.worst.what}, {"analytic", t.worst.analytic}, {"numeric", t.worst.numeric},
                    {"rel_error", t.worst.error}, {"step", t.worst.step}};
    if (!t.reason.empty()) e["reason"] = t.reason;
    j["tensors"].push_back(e);
  }
  j["summary"] = {{"passed", out.passed}, {"failed", out.failed}, {"inconclusive", out.inconclusive}};
  j["seconds"] = out.seconds;
  j["shared_evaluations"] = out.shared_evaluations;
  return j;
}

}  // namespace mosaic::api
