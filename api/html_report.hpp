// report as a library function: one self-contained HTML page with matplotlib figures
// (throughput vs batch, per-node times, loss and accuracy curves, sweep tables) from bench,
// train and sweep runs, each with its table and provenance. docs/report.md.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/status.hpp"

namespace mosaic::api {

struct ReportQuery {
  /// Runs by name: bench/train/generate JSON files, sweep output folders (their sweep.json), run ids
  /// or "last" / "last~N" in the results store `db`.
  std::vector<std::string> inputs;
  std::vector<nlohmann::json> documents;  ///< runs given as their documents (after `inputs`)
  std::string output = "report.html";
  std::string db;     ///< the results store run ids refer to ("": $MOSAIC_DB, else the default)
  std::string title;  ///< "": "Mosaic report"
};

struct ReportOutcome {
  std::string output;
  int figures = 0, runs = 0;
  std::vector<std::string> notes;  ///< a run given twice, drawn once
};

/// Writes the page (atomically: a failure leaves no partial file). The figures are drawn by
/// $MOSAIC_PYTHON, else /usr/bin/python3, with matplotlib. Errors name the input that is not
/// a run, the output that cannot be written, or what the figure script said.
Expected<ReportOutcome> html_report(const ReportQuery& q);

}  // namespace mosaic::api
