// `mosaic optcheck`: verdicts on an optimizer (validate/optcheck.hpp), and the optimizer
// flags shared with `mosaic train` (--optimizer-plugin, --opt key=value).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "ir/file_io.hpp"
#include "cli/train.hpp"
#include "cli/cli_util.hpp"
#include "metrics/junit.hpp"
#include "api/optcheck.hpp"

namespace mosaic::cli {

int run_optcheck(const OptcheckCliOptions& in) {
  OptcheckOptions o;
  o.threads = in.threads;
  o.optimizer = in.optimizer;
  o.config = in.opt;
  Status st = apply_optimizer_flags(in.plugins, in.opt_params, o.config, o.optimizer);
  if (!st.is_ok()) return fail(st);
  o.reference = in.reference;
  o.lr_given = in.lr_given;
  o.onnx_data = in.onnx_data;
  o.model = in.model == "none" ? "" : in.model;
  o.backend = in.backend;
  o.steps = in.steps;
  o.tolerance = in.tolerance;
  o.seed = in.seed;
  if (Status ps = check_output_paths({{"--json", in.json}, {"--junit", in.junit}}); !ps.is_ok()) return fail(ps);
  auto report = api::optcheck(o);
  if (!report.ok()) return fail(report.status());
  const api::OptcheckReport& r = report.value();
  std::printf("optcheck %s%s\n", o.optimizer.c_str(), o.reference.empty() ? "" : (" against " + o.reference).c_str());
  std::vector<JUnitCase> junit;
  for (const auto& c : r.results) {
    junit.push_back({"optcheck [" + o.optimizer + "]", c.check,
                     c.verdict == "PASS"   ? JUnitCase::Outcome::kPass
                     : c.verdict == "FAIL" ? JUnitCase::Outcome::kFail
                                           : JUnitCase::Outcome::kSkipped,
                     c.verdict + ": " + c.detail, 0});
    std::printf("%-4s  %-58s %s\n", c.verdict.c_str(), c.check.c_str(), c.detail.c_str());
  }
  std::printf("%d passed, %d failed, %d skipped%s\n", r.passed, r.failed, r.skipped,
              r.inconclusive ? (", " + std::to_string(r.inconclusive) + " inconclusive").c_str() : "");
  if (!in.junit.empty())
    if (Status st = write_junit(in.junit, "mosaic optcheck", junit); !st.is_ok()) return fail(st);
  if (!in.json.empty()) {
    if (Status st = write_file_atomic(in.json, r.doc.dump(2) + "\n"); !st.is_ok()) return fail(st);
  }
  return r.exit_code();
}

}  // namespace mosaic::cli
