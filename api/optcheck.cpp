// api::optcheck (api/optcheck.hpp).
#include "api/optcheck.hpp"

#include <string>

#include "api/option_rules.hpp"
#include "api/util.hpp"
#include "backends/registry.hpp"

namespace mosaic::api {

Expected<OptcheckReport> optcheck(const OptcheckOptions& o) {
  MOSAIC_RETURN_IF_ERROR(check_numbers("optcheck", {{"steps", static_cast<double>(o.steps)},
                                                   {"tolerance", o.tolerance},
                                                   {"threads", o.threads},
                                                   {"lr", o.config.lr},
                                                   {"momentum", o.config.momentum},
                                                   {"weight_decay", o.config.weight_decay}}));
  if (!builtin_registry().has_backend(o.backend)) return unknown_backend(o.backend);
  MOSAIC_RETURN_IF_ERROR(set_num_threads(o.threads));
  MOSAIC_ASSIGN_OR_RETURN(std::vector<OptcheckResult> results, ::mosaic::optcheck(o));
  OptcheckReport r;
  r.doc = {{"schema", "mosaic.optcheck/1"}, {"optimizer", o.optimizer}, {"reference", o.reference},
           {"checks", nlohmann::json::array()}};
  for (const auto& c : results) {
    (c.verdict == "PASS" ? r.passed : c.verdict == "FAIL" ? r.failed : c.verdict == "INCONCLUSIVE" ? r.inconclusive : r.skipped)++;
    r.doc["checks"].push_back({{"check", c.check}, {"verdict", c.verdict}, {"detail", c.detail}});
  }
  r.doc["passed"] = r.passed;
  r.doc["failed"] = r.failed;
  r.doc["skipped"] = r.skipped;
  r.doc["inconclusive"] = r.inconclusive;
  r.doc["provenance"] = provenance_json(run_provenance(o.model, {{"optcheck", std::to_string(o.seed)}}));
  r.results = std::move(results);
  return r;
}

}  // namespace mosaic::api
