#include "cli/train.hpp"
#include "ir/interrupt.hpp"
#include "ir/file_io.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

#include "distributed/data_parallel.hpp"
#include "cli/cli_util.hpp"
#include "metrics/junit.hpp"

namespace mosaic::cli {

int run_train(const TrainOptions& o) {
  dist::MpiSession mpi_session;
  if (Status st = check_output_paths({{"--json", o.json}, {"--save", o.save}, {"--trace", o.trace}, {"--checkpoint", o.checkpoint}});
      !st.is_ok())
    return fail(st);
  if (!builtin_registry().has_backend(o.backend))
    return fail(unknown_backend(o.backend));
  auto db = open_run_store(o.db);
  if (!db.ok()) return fail(db.status());
  // Ctrl-C/SIGTERM: training stops at the next step; the finished epochs are written and recorded
  // (marked "interrupted": true). Under mpirun the ranks agree on the step to stop at; mpirun
  // sends them SIGTERM on a Ctrl-C and SIGKILL odls_base_sigkill_timeout seconds later, so
  // --json is also written after every epoch: a rank killed mid-epoch leaves the finished ones.
  install_interrupt_handlers(!o.distributed.empty());
  TrainOptions run = o;
  if (!o.json.empty() && o.json != "-")  // stdout gets one document, at the end
    run.on_epoch_done = [&o](const nlohmann::json& log) {
      nlohmann::json so_far = log;
      so_far["interrupted"] = true;  // until the final write replaces it
      so_far["written_after_epoch"] = log["epochs"].size();
      if (Status st = write_file_atomic(o.json, so_far.dump(2) + "\n"); !st.is_ok())
        std::cerr << "mosaic: warning: " << st.message() << "\n";
    };
  auto r = train_model(run, nullptr, true);
  if (!r.ok()) return fail(r.status());
  if (!o.json.empty() && r->rank == 0) {
    if (Status st = write_file_atomic(o.json, r->log.dump(2) + "\n"); !st.is_ok()) return fail(st);
  }
  if (r->rank == 0)
    if (Status st = record_run(db.value().get(), r->log); !st.is_ok()) return fail(st);
  if (r->log.value("interrupted", false)) return interrupt_exit_code() ? interrupt_exit_code() : 130;
  return r->diverged.empty() ? 0 : 1;
}

namespace {

/// One note for the tensors that could agree only on the floor (INCONCLUSIVE with probes at
/// the floor): their gradients vanish at these weights, so no input makes them checkable.
/// Without it a user of a nearly dead network (torchvision's mobilenet_v2 exported with its
/// initial BatchNorm statistics: 51 such tensors at seed 1) sees only the per-tensor reasons
/// and tries other seeds.
void print_vanishing_gradients(const GradcheckReport& r) {
  std::vector<std::string> names;
  double largest = 0, model_largest = 0;
  for (const auto& t : r.tensors) {
    model_largest = std::max(model_largest, t.gradient_norm);
    if (t.verdict != Verdict::kInconclusive || t.at_floor == 0) continue;
    names.push_back(t.name);
    largest = std::max(largest, t.gradient_norm);
  }
  if (names.empty()) return;
  const size_t shown = std::min<size_t>(names.size(), 4);
  std::string list = join(std::vector<std::string>(names.begin(), names.begin() + static_cast<ptrdiff_t>(shown)));
  if (names.size() > shown) list += ", and " + std::to_string(names.size() - shown) + " more";
  std::printf("note:  %zu tensor%s (%s) agreed with finite differences only below their error floors (gradient norms up "
              "to %.2g; the model's largest %.2g), where a wrong sign or scale does not show. Their gradients vanish "
              "at these weights (or are zero in exact arithmetic, as a bias before a training-mode "
              "BatchNormalization): another --seed draws another input, not other weights; check them at weights "
              "where they live, such as a trained checkpoint (docs/gradcheck.md, \"Error\")\n",
              names.size(), names.size() == 1 ? "" : "s", list.c_str(), largest, model_largest);
}

/// Prints one backend's gradcheck report as `mosaic gradcheck` shows it.
void print_gradcheck(const GradcheckRunOptions& o, const GradcheckOutcome& outcome) {
  const GradcheckReport& r = outcome.report;
  const std::string& checked = outcome.checked;
  std::printf("gradcheck %s on %s, batch %lld, seed %llu: loss %.9g (double-precision reference %.9g)\n",
              o.model.c_str(), checked.c_str(), static_cast<long long>(o.batch),
              static_cast<unsigned long long>(o.check.seed), r.loss, r.reference_loss);
  if (!r.forward_ok)
    std::printf("FAIL   forward: the %s outputs differ from the reference by %.3g of their scale (tolerance 1e-3); "
                "its gradients are of another function\n", checked.c_str(), r.forward_error);
  if (r.ambiguous)
    std::printf("note:  %lld branch decisions at the base point are within float rounding of a tie or kink "
                "(after %d input draws); the backend may take them either way: %s\n",
                static_cast<long long>(r.ambiguous), r.input_draws,
                r.unresolved ? ("unresolved (" + r.unresolved_reason + "), so a FAIL is INCONCLUSIVE").c_str()
                             : "the numeric side follows the options that fit its gradient best");
  for (const auto& d : r.resolved) std::printf("note:  resolved %s\n", d.c_str());
  const std::string where = o.assign.empty() ? "on " + r.backend : "where placed";
  for (const auto& f : r.fallback_nodes) std::printf("note:  not checked %s: %s\n", where.c_str(), f.c_str());
  for (const auto& f : r.float_reference_nodes)
    std::printf("note:  reference forward in float (no double implementation) for %s\n", f.c_str());
  if (outcome.shared_evaluations)
    std::printf("note:  %lld reference evaluation pairs shared with the backends checked before\n",
                static_cast<long long>(outcome.shared_evaluations));
  size_t width = 6;
  for (const auto& t : r.tensors) width = std::max(width, t.name.size());
  for (const auto& t : r.tensors) {
    std::printf("%-12s %-*s %d probes", verdict_name(t.verdict), static_cast<int>(width), t.name.c_str(), t.checked);
    if (t.kinks || t.unstable || t.at_floor)
      std::printf(" (%d at kinks, %d unstable%s)", t.kinks, t.unstable,
                  t.at_floor ? (", " + std::to_string(t.at_floor) + " only on the floor").c_str() : "");
    if (t.checked)
      std::printf("  worst %s: analytic %.6g numeric %.6g rel err %.2e (step %.2g)", t.worst.what.c_str(),
                  t.worst.analytic, t.worst.numeric, t.worst.error, t.worst.step);
    if (!t.reason.empty()) std::printf("  %s", t.reason.c_str());
    std::printf("\n");
  }
  print_vanishing_gradients(r);
  std::printf("%d passed, %d failed, %d inconclusive\n", outcome.passed, outcome.failed, outcome.inconclusive);
}

/// One JUnit suite per backend: the forward check and one case per tensor.
void junit_cases(const GradcheckRunOptions& o, const GradcheckOutcome& outcome, std::vector<JUnitCase>& cases) {
  const GradcheckReport& r = outcome.report;
  const std::string suite = "gradcheck [" + outcome.checked + "] " + o.model;
  char fwd[160];
  std::snprintf(fwd, sizeof fwd, "outputs differ from the double-precision reference by %.3g of their scale (tolerance 1e-3)",
                r.forward_error);
  cases.push_back({suite, "forward", r.forward_ok ? JUnitCase::Outcome::kPass : JUnitCase::Outcome::kFail, fwd, 0});
  for (const auto& t : r.tensors) {
    char detail[512];
    std::snprintf(detail, sizeof detail, "%s: %d probes judged (%d only on the floor), %d at kinks, %d unstable%s%s",
                  verdict_name(t.verdict), t.checked, t.at_floor, t.kinks, t.unstable, t.reason.empty() ? "" : "; ",
                  t.reason.c_str());
    if (t.checked) {
      char worst[256];
      std::snprintf(worst, sizeof worst, "; worst %s: analytic %.6g numeric %.6g rel err %.2e", t.worst.what.c_str(),
                    t.worst.analytic, t.worst.numeric, t.worst.error);
      std::strncat(detail, worst, sizeof detail - std::strlen(detail) - 1);
    }
    cases.push_back({suite, t.name,
                     t.verdict == Verdict::kPass   ? JUnitCase::Outcome::kPass
                     : t.verdict == Verdict::kFail ? JUnitCase::Outcome::kFail
                                                   : JUnitCase::Outcome::kSkipped,
                     detail, 0});
  }
}

}  // namespace

int run_gradcheck(const GradcheckRunOptions& given) {
  GradcheckRunOptions o = given;
  o.verbose = true;
  if (Status st = check_output_paths({{"--json", o.json}, {"--junit", o.junit}}); !st.is_ok()) return fail(st);
  // One backend, or several sharing the reference's evaluations (--backend a,b / all).
  auto backends = gradcheck_backend_list(o.backend);
  if (!backends.ok()) return fail(backends.status());
  std::vector<GradcheckOutcome> outcomes;
  if (backends->size() == 1) {
    auto r = api::gradcheck(o);
    if (!r.ok()) return fail(r.status());
    outcomes.push_back(std::move(r).value());
  } else {
    auto r = gradcheck_backends(o, backends.value());
    if (!r.ok()) return fail(r.status());
    outcomes = std::move(r).value();
  }
  bool failed = false;
  int inconclusive = 0;
  std::vector<JUnitCase> cases;
  nlohmann::json runs = nlohmann::json::array();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    if (i) std::printf("\n");
    print_gradcheck(o, outcomes[i]);
    junit_cases(o, outcomes[i], cases);
    runs.push_back(gradcheck_json(o, outcomes[i]));
    failed = failed || outcomes[i].failed > 0;
    inconclusive += outcomes[i].inconclusive;
  }
  const int code = failed ? 1 : inconclusive ? 3 : 0;
  if (!o.json.empty()) {
    // One backend: its document; several: a set of them.
    const auto doc = runs.size() == 1 ? runs[0] : nlohmann::json{{"schema", "mosaic.gradcheck-set/1"}, {"runs", runs}};
    if (Status st = write_file_atomic(o.json, doc.dump(2) + "\n"); !st.is_ok()) return fail(st);
  }
  if (!o.junit.empty())
    if (Status st = write_junit(o.junit, "mosaic gradcheck", cases); !st.is_ok()) return fail(st);
  if (code == 3)
    std::fprintf(stderr, "mosaic: %d tensors could not be verified (INCONCLUSIVE is not a pass)\n", inconclusive);
  return code;
}

}  // namespace mosaic::cli
