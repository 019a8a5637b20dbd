#include "api/history.hpp"

#include <memory>

#include "api/util.hpp"

namespace mosaic::api {

Expected<HistoryReport> history(const HistoryQuery& q) {
  if (!q.kind.empty() && q.kind != "bench" && q.kind != "train" && q.kind != "sweep" && q.kind != "generate" &&
      q.kind != "loadgen")
    return Status::invalid("`kind` must be bench, train, sweep, generate or loadgen, got '" + q.kind + "'");
  MOSAIC_ASSIGN_OR_RETURN(auto db, open_existing_store(q.db));
  HistoryReport r;
  r.db = db.path();
  MOSAIC_ASSIGN_OR_RETURN(r.runs, db.list({q.kind, q.model, q.limit}));
  return r;
}

Expected<nlohmann::json> run_document(const std::string& db_path, int64_t id) {
  MOSAIC_ASSIGN_OR_RETURN(auto db, open_existing_store(db_path));
  return db.document(id);
}

nlohmann::json stored_run_json(const StoredRun& r) {
  return {{"id", r.id},           {"kind", r.kind},         {"time_utc", r.time_utc}, {"model", r.model},
          {"mode", r.mode},       {"labels", r.labels},     {"summary", r.summary},   {"hostname", r.hostname},
          {"git_commit", r.git_commit}, {"git_dirty", r.git_dirty}, {"reproducer", r.reproducer},
          {"batch", r.batch},     {"threads", r.threads}};
}

Expected<CompareOutcome> compare_documents(const nlohmann::json& a, const nlohmann::json& b, const CompareOptions& stats,
                                           const std::string& a_name, const std::string& b_name) {
  if (!(stats.alpha > 0 && stats.alpha < 1)) return Status::invalid("`alpha` must be in (0, 1)");
  if (!(stats.threshold >= 0)) return Status::invalid("`threshold` must be >= 0");
  // Two generations compare by their decode steps and first tokens; anything else as bench runs
  // (whose check names a document of another kind).
  auto r = run_kind(a) == "generate" && run_kind(b) == "generate" ? compare_generate_runs(a, b, stats)
                                                                   : compare_bench_runs(a, b, stats);
  if (!r.ok()) return r.status().with_context(a_name + " vs " + b_name);
  CompareOutcome out;
  out.comparison = std::move(r).value();
  out.a_name = a_name;
  out.b_name = b_name;
  out.a_doc = a;
  out.b_doc = b;
  return out;
}

Expected<CompareOutcome> compare(const CompareQuery& q) {
  if (q.a == q.b)
    return Status::invalid("compare " + q.a + " " + q.b + ": A and B are the same run; name two runs (last~1 last)");
  std::unique_ptr<ResultsDb> db;
  MOSAIC_ASSIGN_OR_RETURN(auto a, load_named_run(q.a, q.db, db));
  MOSAIC_ASSIGN_OR_RETURN(auto b, load_named_run(q.b, q.db, db));
  return compare_documents(a.doc, b.doc, q.stats, a.name, b.name);
}

}  // namespace mosaic::api
