#include "server/storage/database.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "server/storage/data_dir.h"

namespace ropeserve::storage {

Statement::~Statement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

Statement& Statement::Bind(int i, std::int64_t v) {
  sqlite3_bind_int64(stmt_, i, v);
  return *this;
}

Statement& Statement::Bind(int i, const std::string& v) {
  sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::BindNull(int i) {
  sqlite3_bind_null(stmt_, i);
  return *this;
}

StatusOr<bool> Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  const std::string why = sqlite3_errmsg(db_);
  if (rc == SQLITE_FULL) return Status(ErrorCode::kResourceExhausted, "the data directory is full: " + why);
  return Internal("database error: " + why);
}

Status Statement::Run() {
  for (;;) {
    RS_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status::Ok();
  }
}

Status Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  return Status::Ok();
}

std::int64_t Statement::Int(int col) const { return sqlite3_column_int64(stmt_, col); }

std::string Statement::Text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  return p == nullptr ? std::string() : std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)));
}

bool Statement::IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

Status Database::Error(const std::string& what) const {
  return FailedPrecondition("database " + path_ + ": " + what + ": " + sqlite3_errmsg(db_));
}

StatusOr<Statement> Database::Prepare(const char* sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr) != SQLITE_OK) return Error("cannot prepare a statement");
  return Statement(db_, stmt);
}

Status Database::Exec(const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) == SQLITE_OK) return Status::Ok();
  const std::string why = message != nullptr ? message : "unknown error";
  sqlite3_free(message);
  if (sqlite3_errcode(db_) == SQLITE_FULL)
    return Status(ErrorCode::kResourceExhausted, "the data directory is full: " + why);
  return Internal("database " + path_ + ": " + why);
}

Status Database::Transaction(const std::function<Status()>& body) {
  RS_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Status s = body();
  if (s.ok()) s = Exec("COMMIT");
  if (!s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  // Committed, and durable in the log already: the copy into the database
  // file is what lets the commit survive the log's loss (a database file
  // copied or restored without its -wal), so its failure changes nothing
  // for the caller.
  (void)Checkpoint();
  return s;
}

std::int64_t Database::Changes() const { return sqlite3_changes(db_); }

StatusOr<std::int64_t> Database::Pragma(const char* sql) {
  RS_ASSIGN_OR_RETURN(Statement st, Prepare(sql));
  auto row = st.Step();
  // A file that is not a database fails here, at its first read.
  if (!row.ok() || !*row) return Error("cannot read it (damaged, or not an SQLite database)");
  return st.Int(0);
}

namespace {

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// What can be told of a database from outside before SQLite reads it: an
// empty file (a crash during a copy, a full disk, a mistaken `> batch.db`)
// would be taken by SQLite as a new, empty database, and a write-ahead log
// without its database as none at all; either way everything the database
// listed would look unknown to its owner.
Status CheckBeforeOpen(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) return FailedPrecondition("database " + path + " is not a regular file");
    if (st.st_size == 0)
      return FailedPrecondition("database " + path +
                                " is empty (0 bytes): it was cut short (a crash while it was copied, a full disk?); "
                                "restore it from a backup, or move it away to start with an empty one");
    return Status::Ok();
  }
  if (errno != ENOENT) return FailedPrecondition("cannot read database " + path + ": " + std::strerror(errno));
  for (const char* suffix : {"-wal", "-journal"})
    if (Exists(path + suffix))
      return FailedPrecondition("database " + path + " is missing but its journal " + path + suffix +
                                " is there: the database was moved or deleted; restore it, or move " + path + suffix +
                                " away to start with an empty one");
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Database>> Database::OpenFile(const std::string& path, std::span<const char* const> migrations,
                                                       bool create) {
  sqlite3* raw = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  std::unique_ptr<Database> db(new Database(raw, path));
  if (rc != SQLITE_OK) return db->Error("cannot open it");
  sqlite3_busy_timeout(raw, 5000);
  sqlite3_extended_result_codes(raw, 0);
  RS_ASSIGN_OR_RETURN(std::int64_t app, db->Pragma("PRAGMA application_id"));
  RS_ASSIGN_OR_RETURN(std::int64_t tables, db->Pragma("SELECT count(*) FROM sqlite_master"));
  if (app != kApplicationId && (app != 0 || tables != 0))
    return FailedPrecondition("database " + path +
                              " belongs to another program (it is not a ropeserve database); move it away or "
                              "choose another --data-dir");
  {
    RS_ASSIGN_OR_RETURN(Statement st, db->Prepare("PRAGMA quick_check(1)"));
    RS_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row || st.Text(0) != "ok")
      return FailedPrecondition("database " + path + " is damaged (" + (row ? st.Text(0) : std::string("?")) +
                                "); restore it from a backup or move it away");
  }
  RS_RETURN_IF_ERROR(db->Exec("PRAGMA journal_mode=WAL"));
  RS_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous=FULL"));
  RS_RETURN_IF_ERROR(db->Exec("PRAGMA foreign_keys=ON"));
  RS_ASSIGN_OR_RETURN(std::int64_t version, db->Pragma("PRAGMA user_version"));
  if (version > static_cast<std::int64_t>(migrations.size()))
    return FailedPrecondition("database " + path + " has schema version " + std::to_string(version) +
                              ", newer than this ropeserve knows (" + std::to_string(migrations.size()) +
                              "): run a newer ropeserve on it");
  for (auto v = static_cast<std::size_t>(version); v < migrations.size(); ++v) {
    const std::string bump = "PRAGMA user_version=" + std::to_string(v + 1);
    const std::string mark = "PRAGMA application_id=" + std::to_string(kApplicationId);
    Status s = db->Transaction([&]() -> Status {
      RS_RETURN_IF_ERROR(db->Exec(migrations[v]));
      RS_RETURN_IF_ERROR(db->Exec(mark.c_str()));
      return db->Exec(bump.c_str());
    });
    if (!s.ok())
      return FailedPrecondition("database " + path + ": migration to schema version " + std::to_string(v + 1) +
                                " failed: " + s.message());
  }
  db->version_ = static_cast<int>(migrations.size());
  return db;
}

StatusOr<std::unique_ptr<Database>> Database::Open(const std::string& path, std::span<const char* const> migrations) {
  RS_RETURN_IF_ERROR(CheckBeforeOpen(path));
  bool created = false;
  if (!Exists(path)) {
    // Made whole under another name, then renamed into place: SQLite
    // creates its file empty and writes the first page later, so a crash
    // in between would leave the empty file CheckBeforeOpen refuses.
    const std::string fresh = path + ".new";
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) ::unlink((fresh + suffix).c_str());
    {
      RS_ASSIGN_OR_RETURN(auto made, OpenFile(fresh, migrations, /*create=*/true));
    }  // closed: the last connection checkpoints the log into the file and removes it
    if (::rename(fresh.c_str(), path.c_str()) != 0)
      return FailedPrecondition("cannot rename " + fresh + " to " + path + ": " + std::strerror(errno));
    RS_RETURN_IF_ERROR(SyncParentDirectory(path));
    created = true;
  }
  RS_ASSIGN_OR_RETURN(auto db, OpenFile(path, migrations, /*create=*/false));
  db->created_ = created;
  return db;
}

Status Database::Checkpoint() {
  int logged = 0, moved = 0;
  if (sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_FULL, &logged, &moved) != SQLITE_OK)
    return Error("cannot copy its log into the database");
  return Status::Ok();
}

Database::~Database() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

}  // namespace ropeserve::storage
