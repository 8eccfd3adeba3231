// One SQLite database (Debian's libsqlite3) of ropeserve's: WAL journal,
// synchronous=FULL (a committed transaction survives a power cut), and a
// schema that knows its version.
//
// The schema is a list of migrations; PRAGMA user_version counts those
// applied, and Open applies the rest, each in its own transaction. PRAGMA
// application_id marks the file as ropeserve's: a database of another
// program, a schema newer than this build, or a damaged file is a clear
// error naming the file, never a silent reset.
//
// Not thread-safe: its owner serializes the calls (one mutex per store).
// Torch-free and model-free.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "server/common/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace ropeserve::storage {

// A prepared statement. Bind by 1-based index; Step() is true while rows
// come; columns by 0-based index.
class Statement {
 public:
  Statement(Statement&& o) noexcept : db_(o.db_), stmt_(o.stmt_) { o.stmt_ = nullptr; }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  Statement& Bind(int i, std::int64_t v);
  Statement& Bind(int i, const std::string& v);
  Statement& BindNull(int i);
  StatusOr<bool> Step();
  // Step() until done; an error when a step fails.
  Status Run();
  // Ready to run again with new bindings.
  Status Reset();

  std::int64_t Int(int col) const;
  std::string Text(int col) const;
  bool IsNull(int col) const;

 private:
  friend class Database;
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

class Database {
 public:
  // 'RSRV': what PRAGMA application_id holds in ropeserve's databases.
  static constexpr std::int32_t kApplicationId = 0x52535256;

  static StatusOr<std::unique_ptr<Database>> Open(const std::string& path, std::span<const char* const> migrations);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  StatusOr<Statement> Prepare(const char* sql);
  Status Exec(const char* sql);
  // `body` between BEGIN IMMEDIATE and COMMIT; ROLLBACK when it fails.
  // After the commit, the log is copied into the database file
  // (Checkpoint): a committed transaction never lives only in the -wal.
  Status Transaction(const std::function<Status()>& body);
  // Rows the last INSERT, UPDATE or DELETE changed.
  std::int64_t Changes() const;
  const std::string& path() const { return path_; }
  // The schema's version (migrations applied).
  int version() const { return version_; }
  // Whether Open made this database (there was no file at `path`).
  bool created() const { return created_; }
  // Copies the write-ahead log into the database file (and syncs it), so
  // that what is committed so far survives the loss of the log.
  Status Checkpoint();

 private:
  Database(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  static StatusOr<std::unique_ptr<Database>> OpenFile(const std::string& path, std::span<const char* const> migrations,
                                                      bool create);
  Status Error(const std::string& what) const;
  StatusOr<std::int64_t> Pragma(const char* sql);
  sqlite3* db_;
  std::string path_;
  int version_ = 0;
  bool created_ = false;
};

}  // namespace ropeserve::storage
