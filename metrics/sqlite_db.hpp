// A small RAII layer over SQLite: open (creating the file), run statements with bound
// parameters, read rows. Shared by the results store (metrics/results_db.hpp) and the
// sweep's cell store. Concurrent writers wait for each other (busy timeout) rather than fail.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "ir/status.hpp"

struct sqlite3;

namespace mosaic {

class SqliteDb {
 public:
  /// NULL, INTEGER, REAL or TEXT.
  using Value = std::variant<std::nullptr_t, int64_t, double, std::string>;
  using Row = std::vector<Value>;

  /// Opens (creating if needed) the database file; errors name the file.
  static Expected<std::unique_ptr<SqliteDb>> open(const std::string& path);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  /// Runs one statement with `params` bound to its ?s, calling `row` for each result row.
  Status run(const std::string& sql, const std::vector<Value>& params = {},
             const std::function<void(const Row&)>& row = nullptr);
  /// Runs several ;-separated statements without parameters (schema creation).
  Status exec_script(const std::string& sql);
  int64_t last_insert_id() const;
  const std::string& path() const { return path_; }

  /// Column helpers: the text / number of a value, or `fallback` when it is NULL.
  static std::string text(const Value& v, const std::string& fallback = "");
  static double number(const Value& v, double fallback = 0);

 private:
  SqliteDb() = default;
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace mosaic
