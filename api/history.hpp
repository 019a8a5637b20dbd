// history and compare as library functions: the runs in the results store, one run's
// document, and two bench (or two generate) runs compared with the statistics of
// metrics/run_compare.hpp.
// `mosaic history` and `mosaic compare` print what these return.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/status.hpp"
#include "metrics/results_db.hpp"
#include "metrics/run_compare.hpp"

namespace mosaic::api {

struct HistoryQuery {
  std::string db;           ///< the store; empty: default_results_db()
  std::string kind;         ///< bench, train or sweep; empty: every kind
  std::string model;        ///< a substring of the model; empty: every model
  int limit = 20;           ///< newest first; 0: all
};

struct HistoryReport {
  std::string db;                ///< the store read
  std::vector<StoredRun> runs;   ///< newest first
};

/// The runs in an existing store (reading never creates one). Errors: a kind other than bench,
/// train or sweep, a store that does not exist or cannot be read.
Expected<HistoryReport> history(const HistoryQuery& q);
/// The document a run recorded (what its --json file held).
Expected<nlohmann::json> run_document(const std::string& db, int64_t id);
nlohmann::json stored_run_json(const StoredRun& r);

struct CompareQuery {
  std::string a, b;  ///< run ids, "last" / "last~N" from the store, or bench or generate JSON files
  std::string db;    ///< the store the ids name; empty: default_results_db()
  CompareOptions stats;
};

struct CompareOutcome {
  RunComparison comparison;
  std::string a_name, b_name;  ///< "run 12", or the file
  nlohmann::json a_doc, b_doc;
};

/// Loads two bench runs (or two generate runs) and compares them. Errors: alpha outside (0, 1), a negative threshold,
/// the same run twice, a run that cannot be found, documents that are not comparable.
Expected<CompareOutcome> compare(const CompareQuery& q);
/// The same on two documents held in memory (mosaic.bench's or mosaic.generate's results in Python).
Expected<CompareOutcome> compare_documents(const nlohmann::json& a, const nlohmann::json& b, const CompareOptions& stats,
                                           const std::string& a_name = "A", const std::string& b_name = "B");

}  // namespace mosaic::api
