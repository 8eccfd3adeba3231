// The Files API's files (POST /v1/files and the rest), kept in the data
// directory so that they survive restarts: metadata in the SQLite database
// DIR/batch.db, contents in DIR/files/<id>, each written atomically before
// its row is committed (a crash leaves at most a content file without a
// row, which the next Open moves to DIR/quarantine/: nothing under files/
// is ever deleted but what a row said and the row's deletion allows).
// Open refuses a data directory whose database is missing while files/
// holds files (and, through storage::Database, an empty, truncated or
// foreign database), naming the file.
//
// Each file belongs to the API key that uploaded it (its digest, "" with
// keys off): for another key it does not exist. Files may expire
// (expires_after); expired ones are removed when next seen.
//
// Thread-safe. Torch-free and model-free.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/status.h"
#include "server/storage/data_dir.h"
#include "server/storage/database.h"

namespace ropeserve::batch {

struct FileInfo {
  std::string id;  // "file-" + 24 hex digits
  std::string filename;
  std::string purpose;
  std::int64_t bytes = 0;
  std::int64_t created_at = 0;  // Unix seconds
  std::int64_t expires_at = 0;  // Unix seconds; 0: kept until deleted
};

// A file to store (FileStore::CreateAll).
struct NewFile {
  std::string filename;
  std::string purpose;
  std::string content;
  std::int64_t expires_after = 0;  // seconds from now; 0: kept until deleted
};

struct FileStoreOptions {
  std::int64_t max_total_bytes = std::int64_t{10} << 30;  // all files' contents together
  // Unix seconds (tests move time); default the system clock.
  std::function<std::int64_t()> clock;
};

class FileStore {
 public:
  // Opens (creating or migrating) DIR/batch.db and DIR/files/.
  static StatusOr<std::unique_ptr<FileStore>> Open(const storage::DataDir& dir, FileStoreOptions options = {});

  // Stores `content`. `expires_after` seconds from now (0: never).
  // ResourceExhausted when max_total_bytes would be passed or the disk is full.
  StatusOr<FileInfo> Create(const std::string& owner, const std::string& filename, const std::string& purpose,
                            std::string_view content, std::int64_t expires_after = 0);
  // Several files at once, all or none: contents written first, then their
  // rows committed in one transaction, in which `also` runs too (the batch
  // store marks a batch finished with its result files).
  using AlsoInTransaction = std::function<Status(storage::Database&, const std::vector<FileInfo>&)>;
  StatusOr<std::vector<FileInfo>> CreateAll(const std::string& owner, const std::vector<NewFile>& files,
                                            const AlsoInTransaction& also = nullptr);
  // Runs `fn` on the database under the store's lock: the batch store's
  // tables live in the same database (server/batch/schema.h).
  Status WithDatabase(const std::function<Status(storage::Database&)>& fn);
  // NotFound for no such file of `owner`'s.
  StatusOr<FileInfo> Get(const std::string& id, const std::string& owner);
  StatusOr<std::string> Content(const std::string& id, const std::string& owner);
  Status Delete(const std::string& id, const std::string& owner);

  struct Page {
    std::vector<FileInfo> files;
    bool has_more = false;
  };
  // `owner`'s files in upload order (newest first unless `ascending`),
  // those of `purpose` only when it is not empty, after the file `after`
  // (InvalidArgument when it is not one of them), at most `limit`.
  StatusOr<Page> List(const std::string& owner, const std::string& purpose, const std::string& after, std::size_t limit,
                      bool ascending);

  std::int64_t total_bytes();
  // Where Open moved the files under files/ that the database did not list
  // (in DIR/quarantine/; the server logs them and counts them in a gauge).
  const std::vector<std::string>& quarantined() const { return quarantined_; }

 private:
  FileStore(std::unique_ptr<storage::Database> db, std::string files_dir, std::string quarantine_dir,
            FileStoreOptions options)
      : db_(std::move(db)),
        files_dir_(std::move(files_dir)),
        quarantine_dir_(std::move(quarantine_dir)),
        options_(options) {}
  std::string ContentPath(const std::string& id) const { return files_dir_ + "/" + id; }
  std::int64_t Now() const;
  StatusOr<std::optional<FileInfo>> FindLocked(const std::string& id, const std::string& owner);
  Status RemoveExpiredLocked();
  StatusOr<std::int64_t> UsedBytesLocked();
  Status QuarantineOrphansLocked();

  std::mutex mu_;
  std::unique_ptr<storage::Database> db_;
  std::string files_dir_;
  std::string quarantine_dir_;
  FileStoreOptions options_;
  std::vector<std::string> quarantined_;  // written by Open only
};

}  // namespace ropeserve::batch
