// `mosaic optcheck`: verdicts on an optimizer (validate/optcheck.hpp), and the optimizer
// flags shared with `mosaic train` (--optimizer-plugin, --opt key=value).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "backends/registry.hpp"
#include "core/file_io.hpp"
#include "frontends/cli/train.hpp"
#include "frontends/cli/cli_util.hpp"
#include "metrics/junit.hpp"
#include "validate/optcheck.hpp"

namespace mosaic::cli {

int run_optcheck(const OptcheckCliOptions& in) {
  set_num_threads(in.threads);
  OptcheckOptions o;
  o.optimizer = in.optimizer;
  o.config = in.opt;
  Status st = apply_optimizer_flags(in.plugins, in.opt_params, o.config, o.optimizer);
  if (!st.is_ok()) {
    std::cerr << "mosaic: error: " << st.message() << "\n";
    return 2;
  }
  o.reference = in.reference;
  o.lr_given = in.lr_given;
  o.onnx_data = in.onnx_data;
  o.model = in.model == "none" ? "" : in.model;
  o.backend = in.backend;
  o.steps = in.steps;
  o.tolerance = in.tolerance;
  o.seed = in.seed;
  if (!builtin_registry().has_backend(o.backend))
    return fail(unknown_backend(o.backend));
  if (Status ps = check_output_paths({{"--json", in.json}, {"--junit", in.junit}}); !ps.is_ok()) return fail(ps);
  auto results = optcheck(o);
  if (!results.ok()) {
    std::cerr << "mosaic: error: " << results.status().message() << "\n";
    return 2;
  }
  int passed = 0, failed = 0, skipped = 0, inconclusive = 0;
  nlohmann::json log = {{"schema", "mosaic.optcheck/1"}, {"optimizer", o.optimizer}, {"reference", o.reference}, {"checks", nlohmann::json::array()}};
  log["provenance"] = provenance_json(run_provenance(o.model, {{"optcheck", std::to_string(o.seed)}}));
  std::printf("optcheck %s%s\n", o.optimizer.c_str(), o.reference.empty() ? "" : (" against " + o.reference).c_str());
  std::vector<JUnitCase> junit;
  for (const auto& r : results.value()) {
    junit.push_back({"optcheck [" + o.optimizer + "]", r.check,
                     r.verdict == "PASS"   ? JUnitCase::Outcome::kPass
                     : r.verdict == "FAIL" ? JUnitCase::Outcome::kFail
                                           : JUnitCase::Outcome::kSkipped,
                     r.verdict + ": " + r.detail, 0});
    std::printf("%-4s  %-58s %s\n", r.verdict.c_str(), r.check.c_str(), r.detail.c_str());
    (r.verdict == "PASS" ? passed : r.verdict == "FAIL" ? failed : r.verdict == "INCONCLUSIVE" ? inconclusive : skipped)++;
    log["checks"].push_back({{"check", r.check}, {"verdict", r.verdict}, {"detail", r.detail}});
  }
  std::printf("%d passed, %d failed, %d skipped%s\n", passed, failed, skipped,
              inconclusive ? (", " + std::to_string(inconclusive) + " inconclusive").c_str() : "");
  log["inconclusive"] = inconclusive;
  log["passed"] = passed;
  log["failed"] = failed;
  log["skipped"] = skipped;
  if (!in.junit.empty())
    if (Status st = write_junit(in.junit, "mosaic optcheck", junit); !st.is_ok()) return fail(st);
  if (!in.json.empty()) {
    if (Status st = write_file_atomic(in.json, log.dump(2) + "\n"); !st.is_ok()) return fail(st);
  }
  return failed ? 1 : inconclusive ? 3 : 0;
}

}  // namespace mosaic::cli
