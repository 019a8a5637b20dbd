#include "metrics/results_db.hpp"

#include <map>

#include <cstdio>
#include <cstdlib>

namespace mosaic {
namespace {

using nlohmann::json;

const char* kTables = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', '1');
CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  kind TEXT NOT NULL,
  schema TEXT NOT NULL,
  time_utc TEXT NOT NULL,
  model TEXT, model_sha256 TEXT, mode TEXT, batch INTEGER, threads INTEGER,
  labels TEXT, summary TEXT,
  hostname TEXT, cpu_model TEXT, git_commit TEXT, git_dirty INTEGER,
  reproducer TEXT,
  document TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS runs_kind_model ON runs (kind, model);
CREATE TABLE IF NOT EXISTS results (
  run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  config TEXT NOT NULL,
  metric TEXT NOT NULL,
  value REAL,
  unit TEXT,
  PRIMARY KEY (run_id, config, metric));
)sql";

/// doc[a][b]... as a string, "" when absent or null.
std::string str_at(const json& doc, std::initializer_list<const char*> path) {
  const json* j = &doc;
  for (const char* k : path) {
    if (!j->is_object() || !j->contains(k)) return "";
    j = &(*j)[k];
  }
  return j->is_string() ? j->get<std::string>() : j->is_null() ? "" : j->dump();
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

struct Metric {
  std::string config, metric, unit;
  json value;
};

/// Headline columns and the long-format results of one document.
struct Extract {
  std::string mode, labels, summary;
  int64_t batch = 0;
  std::vector<Metric> metrics;
};

Extract extract_bench(const json& d) {
  Extract e;
  e.mode = d.value("mode", "");
  e.batch = d.value("batch", int64_t{0});
  for (const auto& r : d.value("runs", json::array())) {
    const std::string label = r.value("label", "");
    const json& s = r.value("summary", json::object());
    const json& it = r.value("iteration_ms", json::object());
    e.labels += (e.labels.empty() ? "" : ",") + label;
    e.summary += (e.summary.empty() ? "" : ", ") + label + " " + fmt("%.3g ms", s.value("median_ms", 0.0)) +
                 fmt(" (%.0f img/s)", s.value("images_per_s", 0.0));
    for (const char* k : {"median", "ci95_low", "ci95_high"})
      if (it.is_object() && it.contains(k)) e.metrics.push_back({label, std::string(k) + "_ms", "ms", it[k]});
    e.metrics.push_back({label, "images_per_s", "1/s", s.value("images_per_s", json())});
    e.metrics.push_back({label, "gflops", "GFLOP/s", s.value("gflops", json())});
    e.metrics.push_back({label, "pct_of_peak", "%", s.value("pct_of_peak", json())});
    if (r.contains("check")) e.metrics.push_back({label, "check_passed", "bool", r["check"].value("passed", false) ? 1 : 0});
  }
  return e;
}

Extract extract_train(const json& d) {
  Extract e;
  e.mode = "training";
  e.batch = d.value("batch", int64_t{0});
  const std::string label = d.value("backend", "") + " " + d.value("optimizer", "") + " lr " + fmt("%g", d.value("lr", 0.0));
  e.labels = d.value("backend", "");
  const json& epochs = d.value("epochs", json::array());
  if (d.contains("diverged")) {
    e.summary = d["diverged"].get<std::string>();
  } else if (!epochs.empty()) {
    const json& last = epochs.back();
    const json acc = last.value("test_accuracy", json());
    e.summary = label + ": " + std::to_string(epochs.size()) + " epoch(s), " +
                (acc.is_number() ? fmt("test acc %.4f", acc.get<double>()) : "train acc " + fmt("%.4f", last.value("train_accuracy", 0.0))) +
                fmt(", %.0f img/s", last.value("images_per_s", 0.0));
    double secs = 0;
    for (const auto& ep : epochs) secs += ep.value("seconds", 0.0);
    e.metrics.push_back({label, "test_accuracy", "fraction", last.value("test_accuracy", json())});
    e.metrics.push_back({label, "train_loss", "nats", last.value("train_loss", json())});
    e.metrics.push_back({label, "images_per_s", "1/s", last.value("images_per_s", json())});
    e.metrics.push_back({label, "mean_epoch_s", "s", secs / static_cast<double>(epochs.size())});
  }
  return e;
}

Extract extract_sweep(const json& d) {
  Extract e;
  e.mode = "training";
  int done = 0, diverged = 0;
  for (const auto& c : d.value("cells", json::array())) {
    const std::string status = c.value("status", "");
    done += status == "done";
    diverged += status == "diverged";
    const std::string label = c.value("model", "") + " " + c.value("backend", "") + " batch " +
                              std::to_string(c.value("batch", int64_t{0})) + " " + c.value("optimizer", "") + " lr " +
                              fmt("%g", c.value("lr", 0.0));
    const json& epochs = c.contains("log") ? c["log"].value("epochs", json::array()) : json::array();
    if (status == "done" && !epochs.empty()) {
      e.metrics.push_back({label, "test_accuracy", "fraction", epochs.back().value("test_accuracy", json())});
      e.metrics.push_back({label, "images_per_s", "1/s", epochs.back().value("images_per_s", json())});
    }
  }
  e.labels = d.value("name", "");
  e.summary = std::to_string(d.value("cells", json::array()).size()) + " cells: " + std::to_string(done) + " done, " +
              std::to_string(diverged) + " diverged";
  return e;
}

Extract extract_generate(const json& d) {
  Extract e;
  e.mode = "generate";
  const json& set = d.value("settings", json::object());
  e.batch = set.value("batch", int64_t{0});
  const std::string label = d.value("backend", "") + " " + d.value("decoding", "");
  e.labels = d.value("backend", "");
  const json& s = d.value("summary", json::object());
  e.summary = label + ": prompt " + std::to_string(set.value("prompt_tokens", int64_t{0})) + ", " +
              std::to_string(set.value("new_tokens", int64_t{0})) + " new, " + fmt("TTFT %.2f ms, ", s.value("ttft_ms", 0.0)) +
              fmt("TPOT %.2f ms, ", s.value("tpot_ms", 0.0)) + fmt("%.1f tokens/s", s.value("decode_tokens_per_s", 0.0));
  e.metrics.push_back({label, "ttft_ms", "ms", s.value("ttft_ms", json())});
  e.metrics.push_back({label, "tpot_ms", "ms", s.value("tpot_ms", json())});
  e.metrics.push_back({label, "decode_tokens_per_s", "1/s", s.value("decode_tokens_per_s", json())});
  e.metrics.push_back({label, "prefill_tokens_per_s", "1/s", s.value("prefill_tokens_per_s", json())});
  if (s.contains("inter_token_ms"))
    e.metrics.push_back({label, "inter_token_p99_ms", "ms", s["inter_token_ms"].value("p99", json())});
  return e;
}

/// A `mosaic loadgen` run: its headline (the scenario's percentile estimate, samples/s, or
/// the server's rate) and, per rate tried, the p99 estimate and throughput.
Extract extract_loadgen(const json& d) {
  Extract e;
  const std::string scenario = d.value("scenario", "");
  e.mode = "loadgen " + scenario;
  e.batch = d.value("samples_per_query", int64_t{0});
  e.labels = d.value("backend", "");
  const std::string label = e.labels + " " + scenario;
  const json& m = d.value("metric", json::object());
  const json value = m.value("value", json());
  e.summary = label + ": " + m.value("name", "") + " " +
              (value.is_number() ? fmt("%.4g", value.get<double>()) + " " + m.value("unit", "") : std::string("none"));
  e.metrics.push_back({label, "metric", m.value("unit", ""), value});
  for (const auto& r : d.value("runs", json::array())) {
    const json rate = r.value("target_rate", json());
    const std::string at = rate.is_number() ? label + fmt(" at %.2f q/s", rate.get<double>()) : label;
    e.metrics.push_back({at, "samples_per_s", "1/s", r.value("samples_per_s", json())});
    e.metrics.push_back({at, "estimate_ms", "ms", r.value("estimate_ms", json())});
    e.metrics.push_back({at, "p99_ms", "ms", r.value("latency_ms", json::object()).value("p99", json())});
  }
  return e;
}

}  // namespace

std::string default_results_db() {
  const char* env = std::getenv("MOSAIC_DB");
  return env && *env ? env : "mosaic-runs.sqlite";
}

std::string run_kind(const nlohmann::json& doc) {
  // The versions this mosaic writes and reads: a newer one is not read as if it were one of them.
  static const std::map<std::string, std::string> kKnown = {
      {"mosaic.bench/1", "bench"}, {"mosaic.bench/2", "bench"}, {"mosaic.train/1", "train"}, {"mosaic.sweep/1", "sweep"},
      {"mosaic.generate/1", "generate"}, {"mosaic.loadgen/1", "loadgen"}};
  if (!doc.is_object() || !doc.contains("schema") || !doc["schema"].is_string()) return "";
  const auto it = kKnown.find(doc["schema"].get<std::string>());
  return it == kKnown.end() ? "" : it->second;
}

Expected<ResultsDb> ResultsDb::open(const std::string& path) {
  auto db = SqliteDb::open(path);
  if (!db.ok()) return db.status();
  ResultsDb r;
  r.db_ = std::move(db).value();
  // A store written by a newer mosaic is not silently reinterpreted.
  bool has_meta = false;
  std::string version;
  MOSAIC_RETURN_IF_ERROR(r.db_->run("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'", {},
                                    [&](const SqliteDb::Row& row) { has_meta = SqliteDb::number(row[0]) > 0; }));
  if (has_meta)
    MOSAIC_RETURN_IF_ERROR(r.db_->run("SELECT value FROM meta WHERE key = 'schema_version'", {},
                                      [&](const SqliteDb::Row& row) { version = SqliteDb::text(row[0]); }));
  if (!version.empty() && std::atoi(version.c_str()) > kResultsDbVersion)
    return Status::invalid(path + ": results store version " + version + " is newer than this mosaic's (" +
                           std::to_string(kResultsDbVersion) + ")");
  if (Status c = r.db_->exec_script(kTables); !c.is_ok())
    return Status::io_error(c.message() + " (is it a Mosaic results store?)");
  return r;
}

Expected<int64_t> ResultsDb::record(const nlohmann::json& doc) {
  const std::string kind = run_kind(doc);
  if (kind.empty())
    return Status::invalid("not a bench, train, sweep, generate or loadgen document (schema '" +
                           str_at(doc, {"schema"}) + "')");
  const Extract e = kind == "bench"      ? extract_bench(doc)
                    : kind == "train"    ? extract_train(doc)
                    : kind == "sweep"    ? extract_sweep(doc)
                    : kind == "generate" ? extract_generate(doc)
                                         : extract_loadgen(doc);
  const json& prov = doc.value("provenance", json::object());
  auto opt_text = [](const std::string& s) -> SqliteDb::Value {
    if (s.empty()) return nullptr;
    return s;
  };
  const std::string threads = str_at(prov, {"machine", "threads"});
  MOSAIC_RETURN_IF_ERROR(db_->exec_script("BEGIN IMMEDIATE"));
  auto rollback = [&](Status st) {
    db_->exec_script("ROLLBACK");
    return st;
  };
  Status st = db_->run(
      "INSERT INTO runs (kind, schema, time_utc, model, model_sha256, mode, batch, threads, labels, summary, hostname, "
      "cpu_model, git_commit, git_dirty, reproducer, document) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      {kind, str_at(doc, {"schema"}), str_at(prov, {"run", "time_utc"}),
       opt_text(kind == "sweep" ? str_at(doc, {"config"}) : str_at(doc, {"model"})),
       opt_text(str_at(prov, {"run", "model_sha256"})), opt_text(e.mode),
       e.batch > 0 ? SqliteDb::Value(e.batch) : SqliteDb::Value(nullptr),
       threads.empty() ? SqliteDb::Value(nullptr) : SqliteDb::Value(int64_t{std::atoll(threads.c_str())}), e.labels,
       e.summary, opt_text(str_at(prov, {"machine", "hostname"})), opt_text(str_at(prov, {"machine", "cpu_model"})),
       opt_text(str_at(prov, {"build", "git_commit"})), int64_t{str_at(prov, {"build", "git_dirty"}) == "true"},
       opt_text(str_at(prov, {"run", "reproducer"})), doc.dump()});
  if (!st.is_ok()) return rollback(st.with_context("cannot record the run"));
  const int64_t id = db_->last_insert_id();
  for (const auto& m : e.metrics) {
    std::vector<SqliteDb::Value> row;
    row.emplace_back(id);
    row.emplace_back(m.config);
    row.emplace_back(m.metric);
    if (m.value.is_number())
      row.emplace_back(m.value.get<double>());
    else
      row.emplace_back(nullptr);
    row.emplace_back(m.unit);
    st = db_->run("INSERT OR REPLACE INTO results (run_id, config, metric, value, unit) VALUES (?, ?, ?, ?, ?)", row);
    if (!st.is_ok()) return rollback(st.with_context("cannot record the run's results"));
  }
  MOSAIC_RETURN_IF_ERROR(db_->exec_script("COMMIT"));
  return id;
}

Expected<std::vector<StoredRun>> ResultsDb::list(const HistoryFilter& f) {
  std::vector<StoredRun> out;
  std::string sql =
      "SELECT id, kind, time_utc, model, mode, labels, summary, hostname, git_commit, git_dirty, reproducer, batch, threads "
      "FROM runs WHERE (? = '' OR kind = ?) AND (? = '' OR instr(model, ?) > 0) ORDER BY id DESC";
  if (f.limit > 0) sql += " LIMIT " + std::to_string(f.limit);
  Status st = db_->run(sql, {f.kind, f.kind, f.model, f.model}, [&](const SqliteDb::Row& r) {
    StoredRun s;
    s.id = static_cast<int64_t>(SqliteDb::number(r[0]));
    s.kind = SqliteDb::text(r[1]);
    s.time_utc = SqliteDb::text(r[2]);
    s.model = SqliteDb::text(r[3]);
    s.mode = SqliteDb::text(r[4]);
    s.labels = SqliteDb::text(r[5]);
    s.summary = SqliteDb::text(r[6]);
    s.hostname = SqliteDb::text(r[7]);
    s.git_commit = SqliteDb::text(r[8]);
    s.git_dirty = SqliteDb::number(r[9]) != 0;
    s.reproducer = SqliteDb::text(r[10]);
    s.batch = static_cast<int64_t>(SqliteDb::number(r[11]));
    s.threads = static_cast<int>(SqliteDb::number(r[12]));
    out.push_back(s);
  });
  if (!st.is_ok()) return st;
  return out;
}

Expected<nlohmann::json> ResultsDb::document(int64_t id) {
  std::string text;
  bool found = false;
  MOSAIC_RETURN_IF_ERROR(db_->run("SELECT document FROM runs WHERE id = ?", {id}, [&](const SqliteDb::Row& r) {
    text = SqliteDb::text(r[0]);
    found = true;
  }));
  if (!found) {
    std::string range = "it is empty";
    MOSAIC_RETURN_IF_ERROR(db_->run("SELECT min(id), max(id), count(*) FROM runs", {}, [&](const SqliteDb::Row& r) {
      if (SqliteDb::number(r[2]) > 0) range = "it has runs " + SqliteDb::text(r[0]) + " to " + SqliteDb::text(r[1]);
    }));
    return Status::not_found("run " + std::to_string(id) + " is not in " + path() + " (" + range + ")");
  }
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded()) return Status::invalid(path() + ": run " + std::to_string(id) + ": stored document is not JSON");
  return doc;
}

Expected<int64_t> ResultsDb::latest(const std::string& kind, int back) {
  int64_t id = 0;
  MOSAIC_RETURN_IF_ERROR(db_->run("SELECT id FROM runs WHERE kind = ? ORDER BY id DESC LIMIT 1 OFFSET ?",
                                  {kind, int64_t{back}},
                                  [&](const SqliteDb::Row& r) { id = static_cast<int64_t>(SqliteDb::number(r[0])); }));
  if (id == 0)
    return Status::not_found(path() + ": " +
                             (back ? "fewer than " + std::to_string(back + 1) + " " + kind + " runs recorded"
                                   : "no " + kind + " run recorded yet"));
  return id;
}

}  // namespace mosaic
