// api::optcheck (api/optcheck.hpp).
#include "api/optcheck.hpp"

#include <string>

#include "api/util.hpp"
#include "backends/registry.hpp"

namespace mosaic::api {

Expected<OptcheckReport> optcheck(const OptcheckOptions& o) {
  if (!builtin_registry().has_backend(o.backend)) return unknown_backend(o.backend);
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
