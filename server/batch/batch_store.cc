#include "server/batch/batch_store.h"

#include <nlohmann/json.hpp>

#include <limits>

#include "server/common/random_id.h"
#include "server/common/unix_time.h"

namespace ropeserve::batch {

namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* kColumns =
    "seq, id, owner, endpoint, input_file_id, completion_window, status, metadata, errors, output_file_id, "
    "error_file_id, output_expires_after, created_at, expires_at, in_progress_at, finalizing_at, completed_at, "
    "failed_at, expired_at, cancelling_at, cancelled_at, total, completed, failed";

BatchInfo Row(const storage::Statement& st) {
  BatchInfo b;
  int c = 0;
  b.seq = st.Int(c++);
  b.id = st.Text(c++);
  b.owner = st.Text(c++);
  b.endpoint = st.Text(c++);
  b.input_file_id = st.Text(c++);
  b.completion_window = st.Text(c++);
  b.status = st.Text(c++);
  b.metadata = st.Text(c++);
  b.errors = st.Text(c++);
  b.output_file_id = st.Text(c++);
  b.error_file_id = st.Text(c++);
  b.output_expires_after = st.Int(c++);
  for (std::int64_t* t : {&b.created_at, &b.expires_at, &b.in_progress_at, &b.finalizing_at, &b.completed_at,
                          &b.failed_at, &b.expired_at, &b.cancelling_at, &b.cancelled_at})
    *t = st.Int(c++);
  b.total = st.Int(c++);
  b.completed = st.Int(c++);
  b.failed = st.Int(c);
  return b;
}

std::string Select(const std::string& where) { return std::string("SELECT ") + kColumns + " FROM batches " + where; }

// The rows `st` gives.
StatusOr<std::vector<BatchInfo>> Rows(storage::Statement& st) {
  std::vector<BatchInfo> out;
  for (;;) {
    RS_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return out;
    out.push_back(Row(st));
  }
}

Status NoSuchBatch(const std::string& id) { return NotFound("no batch with id '" + id.substr(0, 100) + "'"); }

// The time column a status sets ("cancelled" -> cancelled_at). Only these
// names reach SQL text.
const char* TimeColumn(const std::string& status) {
  if (status == "in_progress") return "in_progress_at";
  if (status == "finalizing") return "finalizing_at";
  if (status == "completed") return "completed_at";
  if (status == "failed") return "failed_at";
  if (status == "expired") return "expired_at";
  if (status == "cancelling") return "cancelling_at";
  if (status == "cancelled") return "cancelled_at";
  return nullptr;
}

// batch `seq`: `from` -> `to` (with its time). False when it was not in `from`.
StatusOr<bool> Move(storage::Database& db, std::int64_t seq, const std::string& from, const std::string& to,
                    std::int64_t now) {
  const std::string sql =
      std::string("UPDATE batches SET status = ?, ") + TimeColumn(to) + " = ? WHERE seq = ? AND status = ?";
  RS_ASSIGN_OR_RETURN(storage::Statement st, db.Prepare(sql.c_str()));
  RS_RETURN_IF_ERROR(st.Bind(1, to).Bind(2, now).Bind(3, seq).Bind(4, from).Run());
  return db.Changes() == 1;
}

// A finished batch's lines (its results are in its files, or it failed).
Status DeleteLines(storage::Database& db, std::int64_t seq) {
  RS_ASSIGN_OR_RETURN(storage::Statement st, db.Prepare("DELETE FROM batch_lines WHERE batch_seq = ?"));
  return st.Bind(1, seq).Run();
}

const char* const kActive = "('validating', 'in_progress', 'finalizing', 'cancelling')";

}  // namespace

bool BatchInfo::finished() const {
  return status == "completed" || status == "failed" || status == "expired" || status == "cancelled";
}

std::string BatchErrors(const std::string& code, const std::string& message, const std::string& param,
                        std::int64_t line) {
  ojson e = {{"code", code},
             {"message", message},
             {"param", param.empty() ? ojson(nullptr) : ojson(param)},
             {"line", line > 0 ? ojson(line) : ojson(nullptr)}};
  return ojson{{"object", "list"}, {"data", ojson::array({e})}}.dump();
}

BatchStore::BatchStore(FileStore& files, BatchStoreOptions options) : files_(files), options_(std::move(options)) {}

std::int64_t BatchStore::Now() const {
  if (options_.clock) return options_.clock();
  return UnixSeconds();
}

void BatchStore::SetListener(std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(listener_mu_);
  listener_ = std::move(listener);
}

void BatchStore::Notify() {
  std::lock_guard<std::mutex> lock(listener_mu_);
  if (listener_) listener_();
}

StatusOr<std::int64_t> BatchStore::ActiveLocked(storage::Database& db) {
  RS_ASSIGN_OR_RETURN(storage::Statement st,
                      db.Prepare((std::string("SELECT count(*) FROM batches WHERE status IN ") + kActive).c_str()));
  RS_ASSIGN_OR_RETURN(bool row, st.Step());
  return row ? st.Int(0) : 0;
}

StatusOr<BatchInfo> BatchStore::Create(const std::string& owner, const std::string& input_file_id,
                                       const std::string& endpoint, const std::string& metadata,
                                       std::int64_t output_expires_after) {
  auto file = files_.Get(input_file_id, owner);
  if (!file.ok()) return file.status().WithParam("input_file_id");
  if (file->purpose != "batch")
    return Status(InvalidArgument("file '" + input_file_id.substr(0, 100) + "' has purpose '" + file->purpose +
                                  "', not batch"))
        .WithParam("input_file_id");
  BatchInfo b;
  b.id = RandomId("batch_", 12);
  b.owner = owner;
  b.endpoint = endpoint;
  b.input_file_id = input_file_id;
  b.completion_window = "24h";
  b.status = "validating";
  b.metadata = metadata;
  b.output_expires_after = output_expires_after;
  b.created_at = Now();
  b.expires_at = b.created_at + options_.completion_window_seconds;
  RS_RETURN_IF_ERROR(files_.WithDatabase([&](storage::Database& db) -> Status {
    return db.Transaction([&]() -> Status {
      RS_ASSIGN_OR_RETURN(std::int64_t active, ActiveLocked(db));
      if (active >= options_.max_active)
        return Status(ErrorCode::kResourceExhausted, "the server already runs " + std::to_string(active) +
                                                         " batches, its limit: retry when one has finished");
      RS_ASSIGN_OR_RETURN(storage::Statement st,
                          db.Prepare("INSERT INTO batches (id, owner, endpoint, input_file_id, completion_window, "
                                     "status, metadata, output_expires_after, created_at, expires_at) "
                                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
      st.Bind(1, b.id).Bind(2, owner).Bind(3, endpoint).Bind(4, input_file_id).Bind(5, b.completion_window);
      st.Bind(6, b.status).Bind(7, metadata).Bind(8, output_expires_after).Bind(9, b.created_at);
      RS_RETURN_IF_ERROR(st.Bind(10, b.expires_at).Run());
      RS_ASSIGN_OR_RETURN(storage::Statement seq, db.Prepare("SELECT last_insert_rowid()"));
      RS_RETURN_IF_ERROR(seq.Step().status());
      b.seq = seq.Int(0);
      return Status::Ok();
    });
  }));
  Notify();
  return b;
}

StatusOr<BatchInfo> BatchStore::Get(const std::string& id, const std::string& owner) {
  BatchInfo b;
  bool found = false;
  RS_RETURN_IF_ERROR(files_.WithDatabase([&](storage::Database& db) -> Status {
    RS_ASSIGN_OR_RETURN(storage::Statement st, db.Prepare(Select("WHERE id = ? AND owner = ?").c_str()));
    RS_ASSIGN_OR_RETURN(found, st.Bind(1, id).Bind(2, owner).Step());
    if (found) b = Row(st);
    return Status::Ok();
  }));
  if (!found) return NoSuchBatch(id);
  return b;
}

StatusOr<BatchStore::Page> BatchStore::List(const std::string& owner, const std::string& after, std::size_t limit) {
  Page page;
  RS_RETURN_IF_ERROR(files_.WithDatabase([&](storage::Database& db) -> Status {
    std::int64_t cursor = std::numeric_limits<std::int64_t>::max();
    if (!after.empty()) {
      RS_ASSIGN_OR_RETURN(storage::Statement st, db.Prepare("SELECT seq FROM batches WHERE id = ? AND owner = ?"));
      RS_ASSIGN_OR_RETURN(bool row, st.Bind(1, after).Bind(2, owner).Step());
      if (!row)
        return Status(InvalidArgument("no batch '" + after.substr(0, 100) + "' to list after")).WithParam("after");
      cursor = st.Int(0);
    }
    RS_ASSIGN_OR_RETURN(storage::Statement st,
                        db.Prepare(Select("WHERE owner = ? AND seq < ? ORDER BY seq DESC LIMIT ?").c_str()));
    st.Bind(1, owner).Bind(2, cursor).Bind(3, static_cast<std::int64_t>(limit) + 1);
    RS_ASSIGN_OR_RETURN(page.batches, Rows(st));
    return Status::Ok();
  }));
  if (page.batches.size() > limit) {
    page.batches.pop_back();
    page.has_more = true;
  }
  return page;
}

StatusOr<BatchInfo> BatchStore::Cancel(const std::string& id, const std::string& owner) {
  RS_ASSIGN_OR_RETURN(BatchInfo b, Get(id, owner));
  if (b.status == "cancelling" || b.status == "cancelled") return b;
  if (b.status != "validating" && b.status != "in_progress")
    return FailedPrecondition("batch '" + id + "' is " + b.status +
                              ": only a validating or in-progress batch can be "
                              "cancelled");
  bool moved = false;
  const std::int64_t now = Now();
  RS_RETURN_IF_ERROR(files_.WithDatabase([&](storage::Database& db) -> Status {
    return db.Transaction([&]() -> Status {
      RS_ASSIGN_OR_RETURN(moved, Move(db, b.seq, b.status, "cancelling", now));
      return Status::Ok();
    });
  }));
  // The runner moved it on meanwhile (to finalizing, say): report it as it is.
  if (!moved) return Cancel(id, owner);
  // What this call did (OpenAI's answer to a cancel is the batch in
  // "cancelling"): read back after Notify, a runner fast enough would
  // already have finished it, as one under load did in a test.
  b.status = "cancelling";
  b.cancelling_at = now;
  Notify();
  return b;
}

StatusOr<std::vector<BatchInfo>> BatchStore::InStatus(const std::string& status) {
  std::vector<BatchInfo> out;
  RS_RETURN_IF_ERROR(files_.WithDatabase([&](storage::Database& db) -> Status {
    RS_ASSIGN_OR_RETURN(storage::Statement st, db.Prepare(Select("WHERE status = ? ORDER BY seq").c_str()));
    st.Bind(1, status);
    RS_ASSIGN_OR_RETURN(out, Rows(st));
    return Status::Ok();
  }));
  return out;
}

Status BatchStore::Fail(const BatchInfo& batch, const std::string& errors) {
  const std::int64_t now = Now();
  return files_.WithDatabase([&](storage::Database& db) -> Status {
    return db.Transaction([&]() -> Status {
      RS_ASSIGN_OR_RETURN(storage::Statement st,
                          db.Prepare("UPDATE batches SET status = 'failed', failed_at = ?, errors = ? WHERE seq = ?"));
      RS_RETURN_IF_ERROR(st.Bind(1, now).Bind(2, errors).Bind(3, batch.seq).Run());
      return DeleteLines(db, batch.seq);
    });
  });
}

Status BatchStore::Validate(const BatchInfo& batch, const BodyCheck& check_body) {
  auto content = files_.Content(batch.input_file_id, batch.owner);
  if (!content.ok())
    return Fail(batch, BatchErrors("file_not_found",
                                   "the input file '" + batch.input_file_id + "' was deleted before the batch started",
                                   "input_file_id"));
  auto lines = ReadBatchInput(*content, options_.input, check_body);
  if (!lines.ok()) return Fail(batch, BatchErrors("invalid_file", lines.status().message(), "input_file_id"));
  // OpenAI: every line calls the batch's endpoint.
  ojson errors = ojson::array();
  for (const BatchLine& l : *lines) {
    if (l.url == batch.endpoint || errors.size() >= 100) continue;
    errors.push_back({{"code", "invalid_url"},
                      {"message", "the line's url " + l.url + " is not the batch's endpoint " + batch.endpoint},
                      {"param", "url"},
                      {"line", l.number}});
  }
  if (!errors.empty()) return Fail(batch, ojson{{"object", "list"}, {"data", errors}}.dump());
  const std::int64_t now = Now();
  return files_.WithDatabase([&](storage::Database& db) -> Status {
    return db.Transaction([&]() -> Status {
      RS_ASSIGN_OR_RETURN(bool moved, Move(db, batch.seq, "validating", "in_progress", now));
      if (!moved) return Status::Ok();  // cancelled meanwhile
      RS_ASSIGN_OR_RETURN(storage::Statement st,
                          db.Prepare("INSERT INTO batch_lines (batch_seq, line, custom_id, body) VALUES (?, ?, ?, ?)"));
      std::int64_t index = 0;
      for (const BatchLine& l : *lines) {
        st.Bind(1, batch.seq).Bind(2, index++).Bind(3, l.custom_id).Bind(4, l.body);
        RS_RETURN_IF_ERROR(st.Run());
        RS_RETURN_IF_ERROR(st.Reset());
      }
      RS_ASSIGN_OR_RETURN(storage::Statement total, db.Prepare("UPDATE batches SET total = ? WHERE seq = ?"));
      return total.Bind(1, index).Bind(2, batch.seq).Run();
    });
  });
}

StatusOr<std::vector<PendingLine>> BatchStore::PendingLines(std::int64_t seq, std::int64_t after, std::size_t limit) {
  std::vector<PendingLine> out;
  RS_RETURN_IF_ERROR(files_.WithDatabase([&](storage::Database& db) -> Status {
    RS_ASSIGN_OR_RETURN(storage::Statement st,
                        db.Prepare("SELECT line, custom_id, body FROM batch_lines WHERE batch_seq = ? AND line > ? "
                                   "AND state = 0 ORDER BY line LIMIT ?"));
    st.Bind(1, seq).Bind(2, after).Bind(3, static_cast<std::int64_t>(limit));
    for (;;) {
      RS_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) return Status::Ok();
      out.push_back({seq, st.Int(0), st.Text(1), st.Text(2)});
    }
  }));
  return out;
}

StatusOr<bool> BatchStore::Record(std::int64_t seq, std::int64_t line, bool ok, const std::string& line_json) {
  bool recorded = false;
  RS_RETURN_IF_ERROR(files_.WithDatabase([&](storage::Database& db) -> Status {
    return db.Transaction([&]() -> Status {
      RS_ASSIGN_OR_RETURN(storage::Statement st,
                          db.Prepare("UPDATE batch_lines SET state = ?, result = ? WHERE batch_seq = ? AND line = ? "
                                     "AND state = 0"));
      RS_RETURN_IF_ERROR(st.Bind(1, ok ? 1 : 2).Bind(2, line_json).Bind(3, seq).Bind(4, line).Run());
      recorded = db.Changes() == 1;
      if (!recorded) return Status::Ok();
      RS_ASSIGN_OR_RETURN(storage::Statement count,
                          db.Prepare(ok ? "UPDATE batches SET completed = completed + 1 WHERE seq = ?"
                                        : "UPDATE batches SET failed = failed + 1 WHERE seq = ?"));
      return count.Bind(1, seq).Run();
    });
  }));
  return recorded;
}

Status BatchStore::StartFinalizing(const BatchInfo& batch) {
  const std::int64_t now = Now();
  return files_.WithDatabase([&](storage::Database& db) -> Status {
    return db.Transaction([&]() -> Status { return Move(db, batch.seq, "in_progress", "finalizing", now).status(); });
  });
}

Status BatchStore::Finalize(const BatchInfo& batch, const std::string& final_status) {
  const char* code = final_status == "expired"     ? "batch_expired"
                     : final_status == "cancelled" ? "batch_cancelled"
                                                   : "batch_incomplete";
  const char* why = final_status == "expired"
                        ? "This request could not be executed before the completion window expired."
                    : final_status == "cancelled" ? "This request was not executed: the batch was cancelled."
                                                  : "This request was not executed.";
  std::string output, errors;
  RS_RETURN_IF_ERROR(files_.WithDatabase([&](storage::Database& db) -> Status {
    RS_ASSIGN_OR_RETURN(
        storage::Statement st,
        db.Prepare("SELECT state, result, custom_id FROM batch_lines WHERE batch_seq = ? ORDER BY line"));
    st.Bind(1, batch.seq);
    for (;;) {
      RS_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) return Status::Ok();
      const std::int64_t state = st.Int(0);
      if (state == 1) {
        output += st.Text(1) + "\n";
      } else if (state == 2) {
        errors += st.Text(1) + "\n";
      } else {
        errors += ojson{{"id", RandomId("batch_req_", 12)},
                        {"custom_id", st.Text(2)},
                        {"response", nullptr},
                        {"error", {{"code", code}, {"message", why}}}}
                      .dump() +
                  "\n";
      }
    }
  }));
  // The output file first, then the error file, each only when it has lines.
  const bool has_output = !output.empty(), has_errors = !errors.empty();
  std::vector<NewFile> made;
  if (has_output)
    made.push_back({batch.id + "_output.jsonl", "batch_output", std::move(output), batch.output_expires_after});
  if (has_errors)
    made.push_back({batch.id + "_error.jsonl", "batch_output", std::move(errors), batch.output_expires_after});
  const std::int64_t now = Now();
  auto done = files_.CreateAll(batch.owner, made, [&](storage::Database& db, const std::vector<FileInfo>& f) -> Status {
    const std::string out_id = has_output ? f.front().id : "";
    const std::string err_id = has_errors ? f.back().id : "";
    const std::string sql = std::string("UPDATE batches SET status = ?, ") + TimeColumn(final_status) +
                            " = ?, output_file_id = ?, error_file_id = ? WHERE seq = ? AND status = ?";
    RS_ASSIGN_OR_RETURN(storage::Statement st, db.Prepare(sql.c_str()));
    st.Bind(1, final_status).Bind(2, now).Bind(3, out_id).Bind(4, err_id).Bind(5, batch.seq).Bind(6, batch.status);
    RS_RETURN_IF_ERROR(st.Run());
    if (db.Changes() != 1) return Status(ErrorCode::kCancelled, "the batch changed status while it was finalized");
    RS_RETURN_IF_ERROR(DeleteLines(db, batch.seq));
    if (options_.before_finalize_commit) options_.before_finalize_commit();
    return Status::Ok();
  });
  if (done.ok()) return Status::Ok();
  if (done.status().code() == ErrorCode::kCancelled) return Status::Ok();  // the next pass sees its new status
  if (done.status().code() != ErrorCode::kResourceExhausted) return done.status();
  // Storage full: the batch fails, saying so; the server goes on.
  return Fail(batch,
              BatchErrors("storage_full", "the batch's results could not be stored: " + done.status().message()));
}

BatchProgress BatchStore::Progress() {
  BatchProgress p;
  (void)files_.WithDatabase([&](storage::Database& db) -> Status {
    RS_ASSIGN_OR_RETURN(storage::Statement st,
                        db.Prepare("SELECT status, count(*), sum(total - completed - failed), sum(completed), "
                                   "sum(failed) FROM batches GROUP BY status ORDER BY status"));
    for (;;) {
      RS_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) return Status::Ok();
      p.rows.push_back({st.Text(0), st.Int(1), st.Int(2), st.Int(3), st.Int(4)});
    }
  });
  return p;
}

}  // namespace ropeserve::batch
