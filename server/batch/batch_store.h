// The Batch API's batches (POST /v1/batches and the rest), durable in the
// data directory's database beside the files (server/batch/schema.h).
//
// A batch's life: Create (status validating) -> Validate (its input file's
// lines copied into batch_lines, status in_progress) -> each line's result
// recorded with Record, in the transaction that marks the line done ->
// Finalize (the output and error files written and the batch marked
// completed, cancelled or expired, in one transaction; the lines' rows
// dropped with it). Every step is one transaction, so a crash at any moment
// leaves a state the runner (server/batch/batch_runner.h) resumes from: a
// line is either pending (it runs again) or done with its result (it never
// runs again), and result files exist exactly when the batch says so.
//
// Each batch belongs to the API key that created it (its digest, "" with
// keys off), as files do: for another key it does not exist.
//
// Thread-safe (the file store's lock serializes the database). Torch-free
// and model-free.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "server/batch/batch_input.h"
#include "server/batch/file_store.h"
#include "server/common/status.h"

namespace ropeserve::batch {

struct BatchInfo {
  std::int64_t seq = 0;  // creation order
  std::string id;        // "batch_" + 24 hex digits
  std::string owner;
  std::string endpoint;
  std::string input_file_id;
  std::string completion_window;  // "24h"
  std::string status;          // validating, in_progress, finalizing, completed, failed, expired, cancelling, cancelled
  std::string metadata;        // a JSON object's text; "" = none
  std::string errors;          // OpenAI's errors object's text; "" = none
  std::string output_file_id;  // "" = none
  std::string error_file_id;   // "" = none
  std::int64_t output_expires_after = 0;  // seconds; 0: result files are kept until deleted
  // Unix seconds; 0 = not (yet).
  std::int64_t created_at = 0, expires_at = 0, in_progress_at = 0, finalizing_at = 0, completed_at = 0, failed_at = 0,
               expired_at = 0, cancelling_at = 0, cancelled_at = 0;
  std::int64_t total = 0, completed = 0, failed = 0;  // request_counts

  // Finished: completed, failed, expired or cancelled.
  bool finished() const;
};

// A line not yet done.
struct PendingLine {
  std::int64_t batch_seq = 0;
  std::int64_t line = 0;  // 0-based
  std::string custom_id;
  std::string body;
};

struct BatchStoreOptions {
  // Batches not finished at once, all owners together: past it, Create is
  // a 429 (serve --batch-max-active).
  std::int64_t max_active = 100;
  std::int64_t completion_window_seconds = 24 * 3600;  // "24h"
  BatchInputLimits input;                              // what a batch's input file may hold
  // Unix seconds (tests move time); default the system clock.
  std::function<std::int64_t()> clock;
  // A test hook for crash tests (serve sets it from
  // ROPESERVE_INJECT_BATCH_CRASH=finalizing): called inside Finalize's
  // transaction, after the result files' contents are written and before
  // their rows commit, the worst moment to die. Never set in production.
  std::function<void()> before_finalize_commit;
};

// Batches and lines per status, for /metrics and the playground.
struct BatchProgress {
  struct Row {
    std::string status;
    std::int64_t batches = 0, pending = 0, completed = 0, failed = 0;
  };
  std::vector<Row> rows;
};

class BatchStore {
 public:
  explicit BatchStore(FileStore& files, BatchStoreOptions options = {});

  // POST /v1/batches: a batch of `owner`'s input file (purpose batch), in
  // status validating. InvalidArgument (param input_file_id) when there is
  // no such file; ResourceExhausted past max_active.
  StatusOr<BatchInfo> Create(const std::string& owner, const std::string& input_file_id, const std::string& endpoint,
                             const std::string& metadata, std::int64_t output_expires_after);
  // NotFound for no such batch of `owner`'s.
  StatusOr<BatchInfo> Get(const std::string& id, const std::string& owner);
  struct Page {
    std::vector<BatchInfo> batches;
    bool has_more = false;
  };
  // Newest first, after the batch `after` (InvalidArgument when it is not
  // one of owner's), at most `limit`.
  StatusOr<Page> List(const std::string& owner, const std::string& after, std::size_t limit);
  // validating / in_progress -> cancelling (the runner then cancels its
  // running lines and finalizes it as cancelled); cancelling and cancelled
  // stay as they are; a finished batch is FailedPrecondition.
  StatusOr<BatchInfo> Cancel(const std::string& id, const std::string& owner);
  // Called after Create and Cancel (the runner wakes up).
  void SetListener(std::function<void()> listener);

  // The runner's side.
  // The batches in `status`, oldest first.
  StatusOr<std::vector<BatchInfo>> InStatus(const std::string& status);
  // validating -> in_progress: the input file's lines copied in one
  // transaction. Lines whose url is not the batch's endpoint, a deleted
  // input file, or one that no longer reads (`check_body`): -> failed, with
  // OpenAI's errors object.
  Status Validate(const BatchInfo& batch, const BodyCheck& check_body);
  // Up to `limit` pending lines of batch `seq` after line `after` (-1:
  // from the first), in order.
  StatusOr<std::vector<PendingLine>> PendingLines(std::int64_t seq, std::int64_t after, std::size_t limit);
  // Records a line's result, `line_json` its whole output-file (ok) or
  // error-file line, with its batch's counts, in one transaction. False
  // when the line was no longer pending (its result was recorded before).
  StatusOr<bool> Record(std::int64_t seq, std::int64_t line, bool ok, const std::string& line_json);
  // in_progress -> finalizing (no pending line is left).
  Status StartFinalizing(const BatchInfo& batch);
  // Writes the output file (completed lines) and the error file (failed
  // lines, and each line not run with error `code`: batch_cancelled,
  // batch_expired), then, in one transaction, their rows and the batch's
  // new status `final_status` (completed, cancelled, expired); the lines'
  // rows go with it. A file that cannot be written (storage full) fails
  // the batch with that error instead.
  Status Finalize(const BatchInfo& batch, const std::string& final_status);
  BatchProgress Progress();

  std::int64_t Now() const;

 private:
  Status Fail(const BatchInfo& batch, const std::string& errors);
  void Notify();  // the listener, after Create and Cancel
  StatusOr<std::int64_t> ActiveLocked(storage::Database& db);

  FileStore& files_;
  BatchStoreOptions options_;
  std::mutex listener_mu_;
  std::function<void()> listener_;
};

// OpenAI's errors object, {"object": "list", "data": [{code, message,
// param, line}]}, of one error (`line` 1-based; 0: none).
std::string BatchErrors(const std::string& code, const std::string& message, const std::string& param = "",
                        std::int64_t line = 0);

}  // namespace ropeserve::batch
