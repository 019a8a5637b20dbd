// gradcheck as a library function: a model's analytic gradients on a backend (or a mixed
// placement) against finite differences of a double-precision reference, tensor by tensor
// (docs/gradcheck.md, docs/api.md). `mosaic gradcheck` is this call plus printing, --json
// and --junit.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/status.hpp"
#include "validate/gradcheck.hpp"

namespace mosaic::api {

struct GradcheckRunOptions {
  std::string model, backend = "naive", json, junit;
  std::string assign;  ///< a mixed placement to check instead of one backend (bench --assign syntax or a YAML file)
  std::vector<std::string> fallback{"naive"};  ///< backends for nodes the checked one cannot run ("none": error)
  std::string plant;  ///< check backend+plant, a planted bug (validate/planted_bugs.hpp): measures gradcheck itself
  int64_t batch = 2;
  int threads = 0;
  GradcheckOptions check;  ///< tolerance, steps, seed, probes (validate/gradcheck.hpp)
  bool verbose = false;    ///< a progress bar on stderr (the CLI sets it)
};

struct GradcheckOutcome {
  GradcheckReport report;  ///< per tensor: verdict, probes, worst error; forward check; notes
  std::string checked;     ///< what was checked: the backend, "placement ...", or "B+BUG"
  int passed = 0, failed = 0, inconclusive = 0;  ///< `failed` counts a failed forward check too
  double seconds = 0;             ///< wall time of the check
  int64_t shared_evaluations = 0;  ///< reference evaluation pairs reused from earlier backends (GradcheckMemo)
  /// The CLI's exit code: 1 if anything FAILed, 3 if nothing failed but something was
  /// INCONCLUSIVE (never a pass), 0 only if every tensor passed.
  int exit_code() const { return failed ? 1 : inconclusive ? 3 : 0; }
};

/// Checks o.model's gradients. Errors: an unknown backend, placement or planted bug, a
/// model that cannot be loaded or trained.
Expected<GradcheckOutcome> gradcheck(const GradcheckRunOptions& o);

/// gradcheck(o) on each of `backends` in turn, sharing the double-precision reference's
/// evaluations (GradcheckMemo): the verdicts are those of separate runs, for about a third
/// of the reference work per backend after the first. Refuses o.assign (one placement).
Expected<std::vector<GradcheckOutcome>> gradcheck_backends(const GradcheckRunOptions& o,
                                                           const std::vector<std::string>& backends);

/// The backends a --backend value names: one name, a comma-separated list, or "all" (every
/// registered backend). Errors name an unknown one.
Expected<std::vector<std::string>> gradcheck_backend_list(const std::string& value);

/// The `--json` document (schema mosaic.gradcheck/1) of an outcome.
nlohmann::json gradcheck_json(const GradcheckRunOptions& o, const GradcheckOutcome& r);

}  // namespace mosaic::api
