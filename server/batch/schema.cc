#include "server/batch/schema.h"

namespace ropeserve::batch {

namespace {

constexpr const char* kSchema[] = {
    // 1: files (server/batch/file_store.h)
    "CREATE TABLE files ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"  // upload order
    "  id TEXT NOT NULL UNIQUE,"
    "  owner TEXT NOT NULL,"
    "  filename TEXT NOT NULL,"
    "  purpose TEXT NOT NULL,"
    "  bytes INTEGER NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  expires_at INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX files_by_owner ON files(owner, seq);",
    // 2: batches and their lines (server/batch/batch_store.h). Times are
    // Unix seconds, 0 for "not yet"; metadata and errors JSON text or "".
    // A line's `result` is its whole output- or error-file line, written in
    // the transaction that sets its state (0 pending, 1 completed, 2 failed).
    "CREATE TABLE batches ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  owner TEXT NOT NULL,"
    "  endpoint TEXT NOT NULL,"
    "  input_file_id TEXT NOT NULL,"
    "  completion_window TEXT NOT NULL,"
    "  status TEXT NOT NULL,"
    "  metadata TEXT NOT NULL DEFAULT '',"
    "  errors TEXT NOT NULL DEFAULT '',"
    "  output_file_id TEXT NOT NULL DEFAULT '',"
    "  error_file_id TEXT NOT NULL DEFAULT '',"
    "  output_expires_after INTEGER NOT NULL DEFAULT 0,"
    "  created_at INTEGER NOT NULL,"
    "  expires_at INTEGER NOT NULL,"
    "  in_progress_at INTEGER NOT NULL DEFAULT 0,"
    "  finalizing_at INTEGER NOT NULL DEFAULT 0,"
    "  completed_at INTEGER NOT NULL DEFAULT 0,"
    "  failed_at INTEGER NOT NULL DEFAULT 0,"
    "  expired_at INTEGER NOT NULL DEFAULT 0,"
    "  cancelling_at INTEGER NOT NULL DEFAULT 0,"
    "  cancelled_at INTEGER NOT NULL DEFAULT 0,"
    "  total INTEGER NOT NULL DEFAULT 0,"
    "  completed INTEGER NOT NULL DEFAULT 0,"
    "  failed INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX batches_by_owner ON batches(owner, seq);"
    "CREATE INDEX batches_by_status ON batches(status, seq);"
    "CREATE TABLE batch_lines ("
    "  batch_seq INTEGER NOT NULL REFERENCES batches(seq) ON DELETE CASCADE,"
    "  line INTEGER NOT NULL,"  // 0-based, in the input file's order
    "  custom_id TEXT NOT NULL,"
    "  body TEXT NOT NULL,"
    "  state INTEGER NOT NULL DEFAULT 0,"
    "  result TEXT NOT NULL DEFAULT '',"
    "  PRIMARY KEY (batch_seq, line)) WITHOUT ROWID;",
};

}  // namespace

std::span<const char* const> BatchSchema() { return kSchema; }

}  // namespace ropeserve::batch
