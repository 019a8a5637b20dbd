// The results store: every bench, train and sweep run with its provenance, in one SQLite
// file (docs/json-schema.md#results-store). `mosaic history` lists it, `mosaic compare`
// reads runs back from it.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "metrics/sqlite_db.hpp"

namespace mosaic {

/// Version of the store's tables (meta.schema_version); a newer file is refused.
inline constexpr int kResultsDbVersion = 1;

/// $MOSAIC_DB when set, else "mosaic-runs.sqlite" in the working directory.
std::string default_results_db();

/// One row of `runs`, without the document.
struct StoredRun {
  int64_t id = 0;
  std::string kind;  ///< bench, train or sweep
  std::string time_utc, model, mode, labels, summary, hostname, git_commit, reproducer;
  bool git_dirty = false;
  int64_t batch = 0;
  int threads = 0;
};

struct HistoryFilter {
  std::string kind;   ///< empty: every kind
  std::string model;  ///< substring of the model; empty: every model
  int limit = 20;     ///< newest first; 0: no limit
};

class ResultsDb {
 public:
  /// Opens or creates the store and its tables.
  static Expected<ResultsDb> open(const std::string& path);

  /// Stores a run document (its "schema" says which kind: mosaic.bench/*, mosaic.train/*,
  /// mosaic.sweep/*) and its headline figures; returns the run id.
  Expected<int64_t> record(const nlohmann::json& doc);
  Expected<std::vector<StoredRun>> list(const HistoryFilter& filter);
  /// The stored document of run `id`; not_found names the store and its id range.
  Expected<nlohmann::json> document(int64_t id);
  /// The newest run of `kind` (`back` > 0: that many runs of the kind before it); not_found
  /// when there is none.
  Expected<int64_t> latest(const std::string& kind, int back = 0);
  const std::string& path() const { return db_->path(); }

 private:
  std::unique_ptr<SqliteDb> db_;
};

/// The run kind of a document's schema ("mosaic.bench/2" -> "bench"); empty if not a run.
std::string run_kind(const nlohmann::json& doc);

}  // namespace mosaic
