// optcheck as a library function: verdicts on an optimizer (validate/optcheck.hpp: reference
// trajectories, ONNX training-op data, convergence, a real network), counted, as the
// mosaic.optcheck/1 document the CLI writes with --json and mosaic.optcheck returns.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "ir/status.hpp"
#include "validate/optcheck.hpp"

namespace mosaic::api {

struct OptcheckReport {
  std::vector<OptcheckResult> results;
  int passed = 0, failed = 0, skipped = 0, inconclusive = 0;
  nlohmann::json doc;  ///< mosaic.optcheck/1: optimizer, reference, checks, counts, provenance
  /// 0 every check passed or was skipped, 1 one failed, 3 none failed but one was inconclusive.
  int exit_code() const { return failed ? 1 : inconclusive ? 3 : 0; }
};

/// Runs the checks `o` asks for. Errors: an unknown optimizer, reference or backend, a model
/// that does not load (the verdicts themselves are results, not errors).
Expected<OptcheckReport> optcheck(const OptcheckOptions& o);

}  // namespace mosaic::api
