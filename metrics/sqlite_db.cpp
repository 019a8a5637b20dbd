#include "metrics/sqlite_db.hpp"

#include <sqlite3.h>

namespace mosaic {

Expected<std::unique_ptr<SqliteDb>> SqliteDb::open(const std::string& path) {
  std::unique_ptr<SqliteDb> db(new SqliteDb());
  db->path_ = path;
  if (sqlite3_open(path.c_str(), &db->db_) != SQLITE_OK)
    return Status::io_error(path + ": cannot open the database: " + sqlite3_errmsg(db->db_));
  // Another mosaic writing the same file (parallel runs, ctest -j) is waited for.
  sqlite3_busy_timeout(db->db_, 30000);
  // Opening does not read the file: make a non-database fail here, with its name.
  if (Status st = db->exec_script("PRAGMA schema_version"); !st.is_ok()) return st;
  return db;
}

SqliteDb::~SqliteDb() {
  if (db_) sqlite3_close(db_);
}

Status SqliteDb::exec_script(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string m = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return Status::io_error(path_ + ": " + m);
  }
  return Status::ok();
}

Status SqliteDb::run(const std::string& sql, const std::vector<Value>& params, const std::function<void(const Row&)>& row) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
    return Status::io_error(path_ + ": " + sqlite3_errmsg(db_));
  struct Finalize {
    sqlite3_stmt* s;
    ~Finalize() { sqlite3_finalize(s); }
  } finalize{st};
  for (size_t i = 0; i < params.size(); ++i) {
    const int k = static_cast<int>(i) + 1;
    const Value& v = params[i];
    if (std::holds_alternative<int64_t>(v))
      sqlite3_bind_int64(st, k, std::get<int64_t>(v));
    else if (std::holds_alternative<double>(v))
      sqlite3_bind_double(st, k, std::get<double>(v));
    else if (std::holds_alternative<std::string>(v))
      sqlite3_bind_text(st, k, std::get<std::string>(v).c_str(), -1, SQLITE_TRANSIENT);
    else
      sqlite3_bind_null(st, k);
  }
  for (;;) {
    const int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) return Status::ok();
    if (rc != SQLITE_ROW) return Status::io_error(path_ + ": " + sqlite3_errmsg(db_));
    if (!row) continue;
    Row r(sqlite3_column_count(st));
    for (int c = 0; c < static_cast<int>(r.size()); ++c) {
      switch (sqlite3_column_type(st, c)) {
        case SQLITE_INTEGER: r[c] = static_cast<int64_t>(sqlite3_column_int64(st, c)); break;
        case SQLITE_FLOAT: r[c] = sqlite3_column_double(st, c); break;
        case SQLITE_NULL: r[c] = nullptr; break;
        default: r[c] = std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, c)));
      }
    }
    row(r);
  }
}

int64_t SqliteDb::last_insert_id() const { return sqlite3_last_insert_rowid(db_); }

std::string SqliteDb::text(const Value& v, const std::string& fallback) {
  if (std::holds_alternative<std::string>(v)) return std::get<std::string>(v);
  if (std::holds_alternative<int64_t>(v)) return std::to_string(std::get<int64_t>(v));
  if (std::holds_alternative<double>(v)) return std::to_string(std::get<double>(v));
  return fallback;
}

double SqliteDb::number(const Value& v, double fallback) {
  if (std::holds_alternative<int64_t>(v)) return static_cast<double>(std::get<int64_t>(v));
  if (std::holds_alternative<double>(v)) return std::get<double>(v);
  return fallback;
}

}  // namespace mosaic
